import PhotoVaultCLI

ProcessSetup.openStandardDescriptors()
ProcessSetup.hardenProcess()
ProcessSetup.runDaemonIfRequested(CommandLine.arguments)
PhotoVaultCLI.main()
