import sys

from agensh_ray.experiment.cli import main

sys.exit(main())
