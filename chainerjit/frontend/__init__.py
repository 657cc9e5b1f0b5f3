"""The front end: from a call to IR.

* A call's key and guards: :mod:`.signature`, :mod:`.guards`, and the
  packing of list arguments (:mod:`.packing`).
* The define-by-run recording (:mod:`.trace`): NumPy run outside
  Chainer's functions (:mod:`.traced`), the patches in force while it
  records (:mod:`.recording_patches`), the model's arrays and Python state
  (:mod:`.model_state`) and the arguments (:mod:`.arguments`).
* Loops: the forward's loop sites and the watcher marking iterations
  (:mod:`.control`), what the forward's source (:mod:`.source`) says of
  trip counts (:mod:`.trip_counts`) and of branches and loop bodies
  (:mod:`.loop_analysis`); the rolling of recorded iterations into
  regions (:mod:`.rolling`) with symbolic trip counts (:mod:`.symbolic`).
"""
