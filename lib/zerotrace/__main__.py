from zerotrace.cli import main

raise SystemExit(main())
