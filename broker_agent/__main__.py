import sys

from broker_agent.cli import main

sys.exit(main())
