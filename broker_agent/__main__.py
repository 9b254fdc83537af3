import sys

from broker_agent.sim import main

sys.exit(main())
