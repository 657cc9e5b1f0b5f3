"""The intermediate representation: the graph (:mod:`.graph`), loop
regions (:mod:`.regions`) and fingerprints of recorded nodes
(:mod:`.fingerprints`). The graph's names are this package's own, so
that ``ir.Graph``, ``ir.Node`` and ``ir.Value`` read as one vocabulary.
"""

from chainerjit.ir.graph import Graph  # NOQA
from chainerjit.ir.graph import Node  # NOQA
from chainerjit.ir.graph import Value  # NOQA
from chainerjit.ir.graph import format_loc  # NOQA
from chainerjit.ir.graph import format_type  # NOQA
