"""The back end: from IR to a runnable program. The VM's opcodes
(:mod:`.opcodes`), code generation (:mod:`.codegen`), the memory plan
(:mod:`.arena`), the program (:mod:`.program`) and the Cython VM
(``_vm.pyx``)."""
