import sys

from memstream.cli import main

sys.exit(main())
