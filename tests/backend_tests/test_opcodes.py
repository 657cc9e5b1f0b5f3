"""The VM's opcodes: its C enum (``_opcodes.pxi``, which ``setup.py``
writes from ``chainerjit/backend/opcodes.py`` at build time) holds the
table's values, so a build older than the table fails here."""

from chainerjit.backend import _vm
from chainerjit.backend import opcodes


def test_the_table_names_every_opcode():
    constants = {name for name in dir(opcodes) if name.isupper() and
                 type(getattr(opcodes, name)) is int}
    assert set(opcodes.OPNAMES.values()) == constants
    assert all(getattr(opcodes, name) == code
               for code, name in opcodes.OPNAMES.items())


def test_the_vm_was_built_with_the_tables_values():
    assert _vm.OPCODES == {name: code
                           for code, name in opcodes.OPNAMES.items()}
