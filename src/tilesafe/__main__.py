"""`python -m tilesafe` is the `tilesafe` command."""
import sys

from .cli import main

sys.exit(main())
