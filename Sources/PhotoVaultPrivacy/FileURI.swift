import Glibc

/// `file://` URIs as GLib writes them (`g_filename_to_uri`), and the thumbnail file names the
/// freedesktop Thumbnail Managing Standard derives from them: `md5(uri)` in lowercase hex,
/// plus `.png`. Every GTK file manager and thumbnailer (Nautilus, Thunar/tumbler, pcmanfm,
/// eog) names thumbnails this way, so a thumbnail whose PNG carries no `Thumb::URI` (pcmanfm's)
/// is still found by name, as long as the vault's paths are known.
public enum FileURI {
    /// `g_filename_to_uri(path, NULL)`: `file://` plus the absolute path with every byte
    /// escaped as `%XX` (uppercase hex) except ASCII letters, digits, `-_.!~*'()` and the
    /// path characters `/&=:@+$,` (GLib's `UNSAFE_PATH` set, gconvert.c).
    public static func uri(ofPath path: String) -> String {
        var out = "file://"
        let hex = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(path.utf8.count * 3)
        for b in path.utf8 {
            if isAllowed(b) { bytes.append(b) } else {
                bytes.append(UInt8(ascii: "%")); bytes.append(hex[Int(b >> 4)]); bytes.append(hex[Int(b & 15)])
            }
        }
        out += String(decoding: bytes, as: UTF8.self)
        return out
    }

    static func isAllowed(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "-_.!~*'()/&=:@+$,".utf8.contains(b)
        }
    }

    /// The thumbnail's file name without `.png`: lowercase hex MD5 of the URI's bytes.
    public static func thumbnailName(ofURI uri: String) -> String {
        let digest = MD5.digest(Array(uri.utf8))
        let hex = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for d in digest { out.append(hex[Int(d >> 4)]); out.append(hex[Int(d & 15)]) }
        return String(decoding: out, as: UTF8.self)
    }

    /// The thumbnail names of `path` as seen through each of `prefixes` (a path relative to
    /// the mountpoint; "" is the mountpoint itself).
    public static func thumbnailNames(relativePath rel: String, prefixes: [String]) -> [String] {
        prefixes.map { p in
            let full = rel.isEmpty ? p : (p == "/" ? "/" + rel : p + "/" + rel)
            return thumbnailName(ofURI: uri(ofPath: full))
        }
    }
}
