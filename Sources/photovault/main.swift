import PhotoVaultCLI

ProcessSetup.hardenProcess()
ProcessSetup.runDaemonIfRequested(CommandLine.arguments)
PhotoVaultCLI.main()
