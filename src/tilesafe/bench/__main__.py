"""`python -m tilesafe.bench`: see `tilesafe.bench.cli`."""
import sys

from .cli import main

sys.exit(main())
