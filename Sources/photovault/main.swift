import PhotoVaultCLI

ProcessSetup.openStandardDescriptors()
ProcessSetup.hardenProcess()
ProcessSetup.restoreChildSignal()
ProcessSetup.runDaemonIfRequested(CommandLine.arguments)
PhotoVaultCLI.main()
