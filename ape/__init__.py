"""APE: an LLM benchmark runner on Prefect.

User code imports its extension helpers from here, e.g. ``from ape import id_field``.
"""

from schemas.check import Failed, Passed
from schemas.data import id_field
from schemas.results import Generation

__all__ = ["Failed", "Generation", "Passed", "id_field"]
__version__ = "0.1.0"
