import sys

from common.report_tables import main

sys.exit(main())
