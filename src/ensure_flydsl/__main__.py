from ensure_flydsl.cli.main import main

raise SystemExit(main())
