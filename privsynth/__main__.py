import sys

from privsynth.cli import main

sys.exit(main())
