from zerotrace_cli import main

raise SystemExit(main())
