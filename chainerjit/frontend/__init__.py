"""The front end: from a call to IR. A call's signature and guards
(:mod:`.signature`, :mod:`.guards`), the packing of list arguments
(:mod:`.packing`), the define-by-run recording (:mod:`.trace`) driven by
the forward's loop sites (:mod:`.control`), and the rolling of recorded
loops into regions (:mod:`.rolling`) with symbolic trip counts
(:mod:`.symbolic`)."""
