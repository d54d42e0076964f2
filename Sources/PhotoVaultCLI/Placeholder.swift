public enum PhotoVaultCLI { public static func main() { print("photovault: not yet") } }
