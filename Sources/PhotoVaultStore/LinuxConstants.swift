/// Linux values that Glibc does not import as Swift constants (`utimensat`'s special times).
public let UTIME_NOW_VALUE: Int = (1 << 30) - 1
public let UTIME_OMIT_VALUE: Int = (1 << 30) - 2
