"""ExoFormer reproduction harness: `python reproduce.py --help`. All logic lives in exoformer/cli.py."""

from exoformer.cli import main

raise SystemExit(main())
