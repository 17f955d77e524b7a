import sys

from vecsift.tools.cli import main

sys.exit(main())
