import PhotoVaultCLI
PhotoVaultCLI.main()
