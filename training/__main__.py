import sys

from training.train import main

sys.exit(main())
