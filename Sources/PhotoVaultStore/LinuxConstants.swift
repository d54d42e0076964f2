/// Linux values that Glibc does not import as Swift constants (`utimensat`'s special times,
/// `lseek`'s data and hole searches).
public let UTIME_NOW_VALUE: Int = (1 << 30) - 1
public let UTIME_OMIT_VALUE: Int = (1 << 30) - 2
public let SEEK_DATA_VALUE: Int32 = 3
public let SEEK_HOLE_VALUE: Int32 = 4
