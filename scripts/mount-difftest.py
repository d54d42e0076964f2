#!/usr/bin/env python3
"""Differential audit of the mount against a plain directory.

Runs the same scenarios (real tools: truncate, dd, cp, rsync, tar, python mmap, os calls)
in (a) a plain tmpfs directory and (b) a fresh PhotoVault mount whose store is on tmpfs,
and prints every observation that differs: contents (sha256), sizes, modes, link counts,
symlink targets, listings, times, errno names of failing calls.

    scripts/mount-difftest.py [--binary .build/debug/photovault] [--only NAME,...] [--keep]

Run as root (chown, /dev/fuse). Known design differences (README, FORMAT.md) are listed in
EXPECTED and reported as "expected" rather than as divergences.
"""
import argparse, ctypes, errno, hashlib, mmap, os, shutil, stat, subprocess, sys, tempfile, time

GiB = 1 << 30
CHUNK = 4096  # the store's default chunkSize (FORMAT.md section 2)

# (scenario, key) -> why a difference is by design
EXPECTED = {
    ("unlink_rename", "whiteout"): "RENAME_WHITEOUT (overlayfs's) is refused with EINVAL (README)",
    ("copy", "otmpfile"): "O_TMPFILE is refused with EOPNOTSUPP (README)",
    ("copy", "fallocate"): "FALLOC_FL_ZERO_RANGE makes holes on the mount; tmpfs refuses it (EOPNOTSUPP)",
    ("copy", "tree/cfr/sha"): "follows from the zero range above, which tmpfs refuses",
    ("copy", "tree/.thumbnails"): "private thumbnails: a vault's root holds .thumbnails (docs/PRIVACY.md)",
    ("limits", "xattr-value:65497"): "xattr values up to 65,496 bytes (FORMAT.md section 8, README)",
    ("limits", "xattr-value:65536"): "xattr values up to 65,496 bytes (FORMAT.md section 8, README)",
    ("limits", "xattr-name:161"): "xattr names up to 160 bytes (FORMAT.md section 8, README)",
    ("limits", "xattr-name:255"): "xattr names up to 160 bytes (FORMAT.md section 8, README)",
    ("ctimes", "file:write"): "a write reads the chunk it rewrites underneath: atime may move (README)",
    ("ctimes", "file:write-same-fd-partial"): "a write reads the chunk it rewrites underneath: atime may move (README)",
    ("ctimes", "file:write-whole-chunk"): "a write reads the chunk it rewrites underneath: atime may move (README)",
    ("ctimes", "file:truncate-same"): "the atime moved by the write before it, seen once the cached attributes expire (README)",
}


def sh(cmd, cwd=None, check=True):
    r = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.returncode}: {r.stderr}")
    return r


def sha(path, start=0, length=None):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(start)
        left = length
        while True:
            n = 1 << 20 if left is None else min(1 << 20, left)
            if n == 0:
                break
            b = f.read(n)
            if not b:
                break
            h.update(b)
            if left is not None:
                left -= len(b)
    return h.hexdigest()[:16]


def errname(fn):
    try:
        r = fn()
        return "ok" if r is None else r
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def norm_time(ns):
    """Times set by the run itself (now) differ between the two runs: only say "recent"."""
    return "recent" if abs(ns - time.time_ns()) < 600 * 10**9 else ns


def tree(root, times=False, skip=()):
    """A listing with type, size, mode, nlink, symlink target, content hash per entry."""
    out = {}
    inos = {}
    for dp, dns, fns in os.walk(root):
        for n in sorted(dns + fns):
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if rel in skip:
                continue
            st = os.lstat(p)
            d = {"mode": oct(st.st_mode), "nlink": st.st_nlink, "uid": st.st_uid, "gid": st.st_gid}
            if stat.S_ISREG(st.st_mode):
                d["size"] = st.st_size
                d["sha"] = sha(p)
                inos.setdefault(st.st_ino, []).append(rel)
            elif stat.S_ISLNK(st.st_mode):
                d["target"] = os.readlink(p)
            if times:
                d["mtime_ns"] = norm_time(st.st_mtime_ns)
            out[rel] = d
    # hard-link groups (by inode, names only)
    out["#linkgroups"] = sorted(sorted(v) for v in inos.values() if len(v) > 1)
    return out


class Ctx:
    def __init__(self, root, remount, kind, scratch):
        self.root, self.remount, self.kind, self.scratch = root, remount, kind, scratch

    def p(self, *parts):
        return os.path.join(self.root, *parts)


# ---------------------------------------------------------------- scenarios

def s_big(c):
    """Offsets beyond 4 GiB: truncate -s 5G, dd writes near 4 GiB and 5 GiB, holes, cp --sparse."""
    o = {}
    f = c.p("f")
    sh(f"truncate -s 5G {f}")
    sh(f"printf 'NEAR4G-crossing' | dd of={f} bs=1 seek=$((4*1024*1024*1024 - 7)) conv=notrunc status=none")
    sh(f"printf 'AT4G' | dd of={f} bs=1 seek=$((4*1024*1024*1024 + 4096*3)) conv=notrunc status=none")
    sh(f"printf 'END5G' | dd of={f} bs=1 seek=$((5*1024*1024*1024 - 5)) conv=notrunc status=none")
    sh(f"printf 'PAST5G' | dd of={f} bs=1 seek=$((5*1024*1024*1024 + 10000)) conv=notrunc status=none")
    st = os.stat(f)
    o["size"] = st.st_size
    o["sparse:f"] = st.st_blocks * 512 < st.st_size
    o["blocks_sane"] = st.st_blocks * 512 <= st.st_size * 1.05 + (1 << 20)
    with open(f, "rb") as h:
        for name, off, n in [("near4g", 4 * GiB - 16, 40), ("at4g", 4 * GiB + 4096 * 3 - 2, 10),
                             ("end5g", 5 * GiB - 8, 20), ("gap5g", 5 * GiB, 10000), ("past", 5 * GiB + 9998, 20),
                             ("hole1g", GiB + 123, 8192), ("hole2^32-chunk", 4 * GiB - 4096, 4096)]:
            h.seek(off)
            o["read:" + name] = h.read(n).hex() if n <= 64 else hashlib.sha256(h.read(n)).hexdigest()[:16]
    r = sh(f"dd if={f} bs=4096 skip=$((4*1024*1024/4)) count=1 status=none | od -An -c | head -3")
    o["dd-skip"] = r.stdout
    out = os.path.join(c.scratch, "sparse-out")
    sh(f"cp --sparse=always {f} {out}")
    o["out-sha"] = sha(out)
    so = os.stat(out)
    o["out-sparse"] = so.st_blocks * 512 < so.st_size // 2
    sh(f"cp --sparse=always {out} {c.p('back')}")
    sb = os.stat(c.p("back"))
    o["back-size"] = sb.st_size
    o["sparse:back"] = sb.st_blocks * 512 < sb.st_size
    o["back-sha-pieces"] = [sha(c.p("back"), 4 * GiB - 4096, 8192), sha(c.p("back"), 5 * GiB - 4096, 20000)]
    o["cmp"] = sh(f"cmp {f} {c.p('back')}", check=False).returncode
    os.unlink(out)
    c.remount()
    with open(f, "rb") as h:
        h.seek(4 * GiB - 7)
        o["after-remount"] = h.read(15).decode()
    return o


def s_append_pwrite(c):
    """O_APPEND from two processes interleaved; pwrite inside/at/beyond EOF; truncate with a handle open."""
    o = {}
    f = c.p("log")
    a = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    b = os.open(f, os.O_WRONLY | os.O_APPEND)
    pid = os.fork()
    if pid == 0:
        for i in range(300):
            os.write(b, b"child-%04d\n" % i)
        os._exit(0)
    for i in range(300):
        os.write(a, b"parent%04d\n" % i)
    os.waitpid(pid, 0)
    # the same fd interleaving in one process, deterministic
    for i in range(50):
        os.write(a if i % 2 else b, b"X%02d" % i)
    os.close(a); os.close(b)
    data = open(f, "rb").read()
    lines = data.split(b"\n")
    o["append:len"] = len(data)
    o["append:children"] = sorted(l for l in lines if l.startswith(b"child")) == [b"child-%04d" % i for i in range(300)]
    o["append:parents"] = [l for l in lines if l.startswith(b"parent")] == [b"parent%04d" % i for i in range(300)]
    o["append:tail"] = data[-150:].decode()
    # pwrite
    g = c.p("pw")
    fd = os.open(g, os.O_RDWR | os.O_CREAT, 0o600)
    os.write(fd, b"A" * 10000)
    os.pwrite(fd, b"inside", 5000)
    os.pwrite(fd, b"ateof", 10000)
    os.pwrite(fd, b"beyond", 3 * CHUNK + 17)
    os.pwrite(fd, b"far", 40 * CHUNK - 1)
    o["pw:size"] = os.fstat(fd).st_size
    o["pw:sha"] = hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()[:16]
    o["pw:hole-zero"] = os.pread(fd, 8000, 12000) == b"\0" * 8000
    # truncate around chunk boundaries while open (through the fd and through the path)
    res = []
    for size in [2 * CHUNK, 2 * CHUNK - 1, 2 * CHUNK + 1, CHUNK, 5 * CHUNK + 100, 3 * CHUNK, 0, CHUNK * 7 - 3]:
        os.ftruncate(fd, size)
        res.append((size, os.fstat(fd).st_size, hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()[:12]))
        os.pwrite(fd, b"W" * 100, max(0, size - 50))
        res.append(hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()[:12])
    o["trunc-fd"] = res
    res = []
    for size in [CHUNK + 1, 3 * CHUNK, CHUNK - 1]:
        os.truncate(g, size)
        res.append((os.fstat(fd).st_size, hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()[:12]))
        os.write(fd, b"after")  # at the fd's own position, maybe past the new EOF
        res.append((os.fstat(fd).st_size, hashlib.sha256(os.pread(fd, 1 << 20, 0)).hexdigest()[:12]))
    o["trunc-path"] = res
    os.close(fd)
    # an O_RDONLY truncate and write: errors
    fd = os.open(g, os.O_RDONLY)
    o["err:ftruncate-rdonly"] = errname(lambda: os.ftruncate(fd, 0))
    o["err:write-rdonly"] = errname(lambda: os.write(fd, b"x"))
    os.close(fd)
    o["err:pwrite-negative"] = errname(lambda: os.pwrite(os.open(g, os.O_WRONLY), b"x", -1))
    o["tree"] = tree(c.root, skip=("log",))  # its order of lines is the scheduler's
    return o


def s_mmap(c):
    """MAP_SHARED write, msync, read through another fd, after remount."""
    o = {}
    f = c.p("m")
    with open(f, "wb") as h:
        h.write(b"." * (3 * CHUNK + 100))
    fd = os.open(f, os.O_RDWR)
    m = mmap.mmap(fd, 3 * CHUNK + 100, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[10:20] = b"MAPPED-one"
    m[CHUNK - 3:CHUNK + 3] = b"ACROSS"
    m[-5:] = b"TAIL!"
    m.flush()
    o2 = os.open(f, os.O_RDONLY)
    o["other-fd"] = hashlib.sha256(os.pread(o2, 1 << 20, 0)).hexdigest()[:16]
    o["other-fd-bits"] = [os.pread(o2, 10, 10), os.pread(o2, 6, CHUNK - 3), os.pread(o2, 5, 3 * CHUNK + 95)]
    os.close(o2)
    # write(2) then read via the map
    os.pwrite(fd, b"VIA-WRITE", 200)
    o["map-sees-write"] = m[200:209]
    m.close()
    # grow by ftruncate then map the new part
    os.ftruncate(fd, 5 * CHUNK)
    m = mmap.mmap(fd, 5 * CHUNK, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[4 * CHUNK:4 * CHUNK + 4] = b"GROW"
    m.flush()
    m.close()
    os.close(fd)
    o["stat"] = os.stat(f).st_size
    c.remount()
    d = open(f, "rb").read()
    o["after-remount"] = hashlib.sha256(d).hexdigest()[:16]
    o["after-remount-bits"] = [d[10:20], d[CHUNK - 3:CHUNK + 3], d[4 * CHUNK:4 * CHUNK + 4]]
    # a read-only mapping of an empty file, and a map beyond EOF
    open(c.p("empty"), "wb").close()
    fd = os.open(c.p("empty"), os.O_RDWR)
    os.ftruncate(fd, 100)
    m = mmap.mmap(fd, 100, mmap.MAP_SHARED)
    m[:5] = b"EMPTY"
    m.flush()
    m.close()
    os.close(fd)
    o["mmap-was-empty"] = open(c.p("empty"), "rb").read()
    return o


def renameat2(old, new, flags):
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.renameat2(-100, old.encode(), -100, new.encode(), flags)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def s_unlink_rename(c):
    o = {}
    f = c.p("open-unlinked")
    with open(f, "wb") as h:
        h.write(b"U" * 10000)
    fd = os.open(f, os.O_RDWR)
    os.unlink(f)
    o["gone"] = os.path.exists(f)
    o["listing"] = sorted(os.listdir(c.root))
    o["read"] = os.pread(fd, 5, 9995)
    os.pwrite(fd, b"still-writable", 20000)
    o["fstat"] = (os.fstat(fd).st_size, os.fstat(fd).st_nlink)
    o["read2"] = os.pread(fd, 14, 20000)
    os.ftruncate(fd, 3)
    o["fstat2"] = os.fstat(fd).st_size
    # a new file with the same name while the old one is open
    with open(f, "wb") as h:
        h.write(b"new")
    o["old-fd-after-new"] = os.pread(fd, 100, 0)
    os.close(fd)
    os.unlink(f)
    # rename over an open file
    a, b = c.p("a"), c.p("b")
    open(a, "wb").write(b"AAAA" * 2000)
    open(b, "wb").write(b"BBBB" * 3000)
    fd = os.open(b, os.O_RDWR)
    os.rename(a, b)
    o["over:open-old"] = (os.pread(fd, 4, 0), os.fstat(fd).st_size, os.fstat(fd).st_nlink)
    os.pwrite(fd, b"old-written", 0)
    o["over:new-content"] = open(b, "rb").read(8)
    os.close(fd)
    # directories across parents
    os.makedirs(c.p("p1/sub/deep"))
    os.makedirs(c.p("p2"))
    open(c.p("p1/sub/deep/x"), "w").write("x")
    os.rename(c.p("p1/sub"), c.p("p2/moved"))
    o["dir:nlink"] = [os.stat(c.p(x)).st_nlink for x in ["p1", "p2", "p2/moved", "p2/moved/deep"]]
    o["dir:err-into-self"] = errname(lambda: os.rename(c.p("p2"), c.p("p2/moved/inside")))
    os.makedirs(c.p("p3/nonempty/y"))
    o["dir:err-over-nonempty"] = errname(lambda: os.rename(c.p("p2/moved"), c.p("p3/nonempty")))
    o["dir:err-file-over-dir"] = errname(lambda: os.rename(b, c.p("p3/nonempty")))
    o["dir:err-dir-over-file"] = errname(lambda: os.rename(c.p("p3/nonempty"), b))
    os.makedirs(c.p("p3/empty"))
    o["dir:over-empty"] = errname(lambda: os.rename(c.p("p2/moved"), c.p("p3/empty")))
    o["err:rmdir-nonempty"] = errname(lambda: os.rmdir(c.p("p3")))
    o["err:unlink-dir"] = errname(lambda: os.unlink(c.p("p3")))
    o["err:open-missing"] = errname(lambda: os.open(c.p("nope"), os.O_RDONLY))
    o["err:excl"] = errname(lambda: os.open(b, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    o["err:open-dir-write"] = errname(lambda: os.open(c.p("p3"), os.O_WRONLY))
    o["err:notdir"] = errname(lambda: os.stat(b + "/x"))
    # RENAME_EXCHANGE (mv --exchange in coreutils 9.5+) and RENAME_NOREPLACE
    open(c.p("e1"), "w").write("one")
    os.makedirs(c.p("e2"))
    o["exchange"] = errname(lambda: renameat2(c.p("e1"), c.p("e2"), 2))
    o["noreplace"] = errname(lambda: renameat2(c.p("a-none") if False else b, c.p("e1"), 1))
    open(c.p("wsrc"), "w").write("w")
    o["whiteout"] = errname(lambda: renameat2(c.p("wsrc"), c.p("w"), 4))
    for x in ["w", "wsrc"]:
        if os.path.lexists(c.p(x)):
            os.unlink(c.p(x))
    o["tree"] = tree(c.root)
    c.remount()
    o["tree-after"] = tree(c.root)
    return o


def s_links(c):
    o = {}
    a = c.p("a")
    open(a, "w").write("linked")
    os.makedirs(c.p("d"))
    os.link(a, c.p("d/b"))
    o["nlink"] = [os.stat(a).st_nlink, os.stat(c.p("d/b")).st_nlink]
    o["same-ino"] = os.stat(a).st_ino == os.stat(c.p("d/b")).st_ino
    with open(c.p("d/b"), "a") as h:
        h.write("+more")
    o["shared"] = open(a).read()
    o["err:link-exists"] = errname(lambda: os.link(a, c.p("d/b")))
    o["err:link-dir"] = errname(lambda: os.link(c.p("d"), c.p("d2")))
    os.symlink("../a", c.p("d/s"))
    os.link(c.p("d/s"), c.p("s-hard"))   # link(2) of a symlink itself
    o["symlink-hard"] = (os.readlink(c.p("s-hard")), os.lstat(c.p("s-hard")).st_nlink)
    fd = os.open(a, os.O_RDONLY)
    os.unlink(a)
    o["after-unlink"] = (os.stat(c.p("d/b")).st_nlink, os.fstat(fd).st_nlink, open(c.p("d/b")).read())
    os.close(fd)
    o["rename-onto-own-link"] = errname(lambda: (os.link(c.p("d/b"), c.p("c")), os.rename(c.p("c"), c.p("d/b")))[1])
    o["tree"] = tree(c.root)
    c.remount()
    o["tree-after"] = tree(c.root)
    return o


def make_source(src):
    os.makedirs(src + "/dir/sub")
    open(src + "/dir/a.jpg", "wb").write(os.urandom(0) + b"J" * 70000)
    open(src + "/dir/sub/b", "wb").write(bytes(range(256)) * 500)
    open(src + "/empty", "wb").close()
    os.symlink("dir/a.jpg", src + "/ln")
    os.symlink("nowhere", src + "/dangling")
    os.link(src + "/dir/a.jpg", src + "/hard")
    os.chmod(src + "/dir/sub/b", 0o640)
    os.chmod(src + "/dir/sub", 0o750)
    sh(f"truncate -s 300000 {src}/sparse && printf mid | dd of={src}/sparse bs=1 seek=150000 conv=notrunc status=none")
    for i, p in enumerate(["dir/a.jpg", "dir/sub/b", "empty", "sparse", "dir/sub", "dir"]):
        os.utime(src + "/" + p, ns=(1_600_000_000_123_456_789 + i, 1_500_000_000_987_654_321 + i))
    os.utime(src + "/ln", ns=(1_400_000_000_111_111_111, 1_400_000_000_222_222_222), follow_symlinks=False)


def s_tools(c):
    """rsync -a twice, rsync --inplace, tar -c/-d, cp -a."""
    o = {}
    src = os.path.join(c.scratch, "src")
    shutil.rmtree(src, ignore_errors=True)
    make_source(src)
    d = c.p("r")
    o["rsync1"] = sh(f"rsync -aH --itemize-changes {src}/ {d}/ | sort").stdout.count("\n")
    o["rsync2"] = sh(f"rsync -aH --itemize-changes {src}/ {d}/").stdout
    o["tree-r"] = tree(d, times=True)
    # modify and rsync --inplace
    open(src + "/dir/a.jpg", "r+b").write(b"CHANGED")
    os.utime(src + "/dir/a.jpg", ns=(1_600_000_000_000_000_001, 1_700_000_000_000_000_001))
    o["inplace"] = sh(f"rsync -aH --inplace --itemize-changes {src}/ {d}/").stdout
    o["inplace2"] = sh(f"rsync -aH --inplace --itemize-changes {src}/ {d}/").stdout
    o["tree-inplace"] = tree(d, times=True)
    # rsync from the mount back out
    back = os.path.join(c.scratch, "back")
    shutil.rmtree(back, ignore_errors=True)
    sh(f"rsync -aH {d}/ {back}/")
    o["rsync-out-again"] = sh(f"rsync -aH --itemize-changes {d}/ {back}/").stdout
    shutil.rmtree(back)
    # cp -a
    sh(f"cp -a {src} {c.p('cpa')}")
    o["tree-cpa"] = tree(c.p("cpa"), times=True)
    sh(f"cp -a {c.p('cpa')} {c.scratch}/cpa-out")
    o["cpa-out"] = tree(c.scratch + "/cpa-out", times=True)
    shutil.rmtree(c.scratch + "/cpa-out")
    # tar of the mount vs the source; compare
    tf = os.path.join(c.scratch, "t.tar")
    sh(f"tar -C {d} -cf {tf} .")
    o["tar-d-src"] = sh(f"tar -C {src} -df {tf}", check=False).stdout
    today = time.strftime("%Y-%m-%d")  # entries made by the run itself: their times differ
    o["tar-list"] = [l for l in sh(f"tar -tvf {tf} --full-time | awk '{{print $1,$3,$4,$5,$6,$7,$8,$9}}' | sort").stdout.splitlines()
                     if today not in l]
    sh(f"mkdir {c.p('untar')} && tar -C {c.p('untar')} -xpf {tf}")
    o["tar-d-untar"] = sh(f"tar -C {c.p('untar')} -df {tf}", check=False).stdout
    o["tree-untar"] = tree(c.p("untar"), times=True)
    os.unlink(tf)
    c.remount()
    o["rsync-after-remount"] = sh(f"rsync -aH --itemize-changes {src}/ {d}/").stdout
    shutil.rmtree(src)
    return o


UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, a, m, flags=0):
    libc = ctypes.CDLL(None, use_errno=True)
    ts = (Timespec * 2)(Timespec(*a), Timespec(*m))
    if libc.utimensat(-100, path.encode(), ts, flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def s_attrs(c):
    o = {}
    f = c.p("f")
    open(f, "w").write("t")
    utimensat(f, (1_000_000_001, 123456789), (1_000_000_002, 987654321))
    st = os.stat(f)
    o["ns"] = (st.st_atime_ns, st.st_mtime_ns)
    utimensat(f, (5, UTIME_OMIT), (1_100_000_000, 1))
    st = os.stat(f)
    o["omit-atime"] = (st.st_atime_ns, st.st_mtime_ns)
    before = time.time_ns()
    utimensat(f, (0, UTIME_OMIT), (0, UTIME_NOW))
    st = os.stat(f)
    o["now-mtime"] = (st.st_atime_ns, abs(st.st_mtime_ns - before) < 5_000_000_000)
    o["ctime-recent"] = abs(st.st_ctime_ns - time.time_ns()) < 5_000_000_000
    utimensat(f, (0, UTIME_OMIT), (0, UTIME_OMIT))
    o["omit-both"] = os.stat(f).st_mtime_ns == st.st_mtime_ns
    o["negative"] = errname(lambda: utimensat(f, (-1, 5), (-86400 * 365 * 100, 999999999)))
    st = os.stat(f)
    o["negative-read"] = (st.st_atime_ns, st.st_mtime_ns)
    o["huge"] = errname(lambda: utimensat(f, (1 << 40, 5), (1 << 40, 7)))
    o["huge-read"] = (os.stat(f).st_atime_ns, os.stat(f).st_mtime_ns)
    o["bad-nsec"] = errname(lambda: utimensat(f, (1, 1_000_000_000), (1, 0)))
    os.symlink("f", c.p("l"))
    o["lutimes"] = errname(lambda: utimensat(c.p("l"), (7, 7), (8, 8), 0x100))
    o["lutimes-read"] = (os.lstat(c.p("l")).st_mtime_ns, os.stat(c.p("l")).st_mtime_ns)
    modes = []
    for m in [0o4755, 0o2755, 0o1777, 0o000, 0o644, 0o7777]:
        os.chmod(f, m)
        modes.append(oct(os.stat(f).st_mode))
    o["chmod-file"] = modes
    os.makedirs(c.p("d"))
    modes = []
    for m in [0o2775, 0o1777, 0o4755, 0o700]:
        os.chmod(c.p("d"), m)
        modes.append(oct(os.stat(c.p("d")).st_mode))
    o["chmod-dir"] = modes
    os.chown(f, 1234, 5678)
    o["chown"] = (os.stat(f).st_uid, os.stat(f).st_gid)
    os.chown(f, -1, 42)
    o["chown-gid-only"] = (os.stat(f).st_uid, os.stat(f).st_gid)
    os.chmod(f, 0o6755)
    os.chown(f, 1, -1)
    o["chown-clears-suid"] = oct(os.stat(f).st_mode)
    os.lchown(c.p("l"), 99, 98)
    o["lchown"] = (os.lstat(c.p("l")).st_uid, os.stat(c.p("l")).st_uid)
    o["mknod-fifo"] = errname(lambda: os.mkfifo(c.p("fifo")))
    o["tree"] = tree(c.root, times=True)
    c.remount()
    o["tree-after"] = tree(c.root, times=True)
    st = os.stat(f)
    o["after-remount"] = (norm_time(st.st_atime_ns), st.st_mtime_ns, oct(st.st_mode), st.st_uid, st.st_gid)
    return o


def s_copy(c):
    """copy_file_range, cp inside the mount, fallocate, SEEK_DATA/SEEK_HOLE, O_APPEND pwrite,
    O_TRUNC under another handle, f* calls on an unlinked open file."""
    o = {}
    src = c.p("src")
    data = hashlib.sha256(b"seed").digest() * ((3 * CHUNK + 777) // 32)
    open(src, "wb").write(data)
    sh(f"truncate -s 100000 {src}")
    sh(f"cp {src} {c.p('cp-inside')} && cp --sparse=always {src} {c.p('cp-sparse')} && cp --reflink=auto {src} {c.p('cp-reflink')}")
    o["cp-inside"] = [sha(c.p(x)) for x in ["src", "cp-inside", "cp-sparse", "cp-reflink"]]
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(c.p("cfr"), os.O_RDWR | os.O_CREAT, 0o644)
    res = []
    for (ioff, ooff, n) in [(0, 0, 5000), (100, CHUNK * 5 + 3, 9000), (99990, 10, 100), (200000, 0, 10)]:
        try:
            res.append(os.copy_file_range(fi, fo, n, ioff, ooff))
        except OSError as e:
            res.append(errno.errorcode[e.errno])
    o["cfr"] = res
    o["cfr-content"] = hashlib.sha256(os.pread(fo, 1 << 20, 0)).hexdigest()[:16]
    o["cfr-size"] = os.fstat(fo).st_size
    # fallocate
    fa = []
    for mode, off, ln in [(0, 0, 50000), (1, 0, 90000), (3, 4096, 8192), (0x10, 0, 4096), (0x20, 0, 4096)]:
        try:
            r = ctypes.CDLL(None, use_errno=True).fallocate(fo, mode, ctypes.c_long(off), ctypes.c_long(ln))
            fa.append("ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
        except OSError as e:
            fa.append(errno.errorcode[e.errno])
        fa.append((os.fstat(fo).st_size, hashlib.sha256(os.pread(fo, 1 << 20, 0)).hexdigest()[:12]))
    o["fallocate"] = fa
    os.close(fo)
    # lseek data/hole on a file with a hole
    h = os.open(src, os.O_RDONLY)
    o["seek-data"] = errname(lambda: os.lseek(h, 50000, os.SEEK_DATA))
    o["seek-hole"] = errname(lambda: os.lseek(h, 0, os.SEEK_HOLE))
    o["seek-data-eof"] = errname(lambda: os.lseek(h, 100000, os.SEEK_DATA))
    o["seek-end"] = os.lseek(h, -10, os.SEEK_END)
    os.close(h)
    os.close(fi)
    # pwrite on an O_APPEND descriptor appends (Linux)
    ap = os.open(c.p("ap"), os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(ap, b"0123456789")
    os.pwrite(ap, b"PW", 2)
    o["append-pwrite"] = open(c.p("ap"), "rb").read()
    o["append-pos"] = os.lseek(ap, 0, os.SEEK_CUR)
    # O_TRUNC while another handle is open and positioned
    os.lseek(ap, 0, os.SEEK_SET)
    tr = os.open(c.p("ap"), os.O_WRONLY | os.O_TRUNC)
    o["otrunc-other-sees"] = (os.fstat(ap).st_size, os.read(ap, 10))
    os.write(tr, b"abc")
    os.write(ap, b"Z")
    o["otrunc-after"] = open(c.p("ap"), "rb").read()
    os.close(tr); os.close(ap)
    # f* calls on an unlinked open file
    u = os.open(c.p("u"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(u, b"x" * 9000)
    os.unlink(c.p("u"))
    os.fchmod(u, 0o600)
    os.utime(u, ns=(1_000_000_000_000_000_001, 1_000_000_000_000_000_002))
    os.ftruncate(u, 5000)
    os.fchown(u, 77, 78)
    st = os.fstat(u)
    o["unlinked-f"] = (oct(st.st_mode), norm_time(st.st_mtime_ns), st.st_size, st.st_uid, st.st_nlink, len(os.pread(u, 9000, 0)))
    o["unlinked-fsync"] = errname(lambda: os.fsync(u))
    os.close(u)
    # O_TMPFILE and linkat of it
    o["otmpfile"] = errname(lambda: os.open(c.root, os.O_TMPFILE | os.O_RDWR, 0o600))
    # st_blocks sanity on a written file
    st = os.stat(c.p("cp-inside"))
    o["blocks-cover-size"] = st.st_blocks * 512 >= st.st_size
    o["tree"] = tree(c.root)
    return o


def s_editors(c):
    """sed -i, vim-style backup-and-rename, and write-in-place saves keep mode, owner, links."""
    o = {}
    f = c.p("doc.txt")
    open(f, "w").write("line one\nline two\n" * 500)
    os.chmod(f, 0o640)
    os.chown(f, 1234, 4321)
    sh(f"sed -i 's/two/TWO/' {f}")
    st = os.stat(f)
    o["sed-i"] = (oct(st.st_mode), st.st_uid, st.st_gid, sha(f))
    os.link(f, c.p("doc-link"))
    sh(f"printf ',s/one/ONE/\\nw\\nq\\n' | ed -s {f}", check=False)  # ed writes in place
    o["ed"] = (sha(f), sha(c.p("doc-link")), os.stat(f).st_nlink)
    o["vim"] = sh(f"command -v vim.tiny >/dev/null && vim.tiny -u NONE -i NONE -es -c '%s/ONE/1/' -c 'wq' {f}; "
                  f"stat -c '%a %u %g %h' {f}", check=False).stdout
    # save by temp file + fsync + rename over (what most editors and photo tools do)
    tmp = c.p(".doc.txt.tmp")
    with open(tmp, "w") as h:
        h.write("replaced\n")
        h.flush()
        os.fsync(h.fileno())
    os.chmod(tmp, 0o640)
    os.rename(tmp, f)
    o["rename-save"] = (open(f).read(), os.stat(c.p("doc-link")).st_nlink, open(c.p("doc-link")).read()[:8])
    dfd = os.open(c.root, os.O_RDONLY | os.O_DIRECTORY)
    o["fsync-dir"] = errname(lambda: os.fsync(dfd))
    os.close(dfd)
    o["tree"] = tree(c.root)
    return o


def s_limits(c):
    """Lengths of symlink targets, xattr names and values at and past the limits."""
    o = {}
    for n in (3000, 3001, 4095, 4096):
        p = c.p("l%d" % n)
        o["symlink:%d" % n] = errname(lambda: (os.symlink("t" * n, p), len(os.readlink(p)))[1])
    f = c.p("x")
    open(f, "w").close()
    for n in (65496, 65497, 65536, 65537):
        o["xattr-value:%d" % n] = errname(lambda: (os.setxattr(f, "user.v", b"v" * n), len(os.getxattr(f, "user.v")))[1])
    for n in (160, 161, 255, 256):
        o["xattr-name:%d" % n] = errname(lambda: os.setxattr(f, "user." + "n" * (n - 5), b"v"))
    for n in (255, 256):
        o["name:%d" % n] = errname(lambda: open(c.p("f" * n), "w").close())
    return o


def s_ctimes(c):
    """Which calls change a file's ctime/mtime and a directory's mtime (each compared as changed
    or not, 20 ms apart)."""
    o = {}
    os.makedirs(c.p("d"))
    os.makedirs(c.p("e"))
    f = c.p("d/f")
    open(f, "w").write("x")
    fd = os.open(f, os.O_RDWR)

    def changes(what, path, fn):
        before = os.lstat(path)
        time.sleep(0.02)
        fn()
        after = os.lstat(path if os.path.lexists(path) else fn.__dict__.get("moved", path))
        o[what] = (after.st_ctime_ns != before.st_ctime_ns, after.st_mtime_ns != before.st_mtime_ns,
                   after.st_atime_ns != before.st_atime_ns)

    changes("file:chmod", f, lambda: os.chmod(f, 0o600))
    changes("file:chown", f, lambda: os.chown(f, 5, 5))
    changes("file:link", f, lambda: os.link(f, c.p("d/g")))
    changes("file:unlink-other-name", f, lambda: os.unlink(c.p("d/g")))
    changes("file:open-rw", f, lambda: os.close(os.open(f, os.O_RDWR)))
    changes("file:stat", f, lambda: os.stat(f))
    changes("file:write", f, lambda: open(f, "a").write("y"))
    changes("file:write-whole-chunk", f, lambda: os.pwrite(fd, b"z" * CHUNK, CHUNK))
    changes("file:write-same-fd-partial", f, lambda: os.pwrite(fd, b"w" * 10, 3))
    changes("file:truncate-same", f, lambda: os.truncate(f, 2))
    changes("file:setxattr", f, lambda: os.setxattr(f, "user.k", b"v"))
    changes("file:read", f, lambda: open(f).read())
    changes("dir:create", c.p("d"), lambda: open(c.p("d/new"), "w").close())
    changes("dir:unlink", c.p("d"), lambda: os.unlink(c.p("d/new")))
    changes("dir:rename-within", c.p("d"), lambda: os.rename(f, c.p("d/f2")))
    changes("dir:rename-out", c.p("d"), lambda: os.rename(c.p("d/f2"), c.p("e/f3")))
    changes("dir:rename-in", c.p("e"), lambda: None)
    changes("dir:mkdir", c.p("d"), lambda: os.mkdir(c.p("d/sub")))
    changes("dir:chmod", c.p("d"), lambda: os.chmod(c.p("d"), 0o711))
    changes("dir:listing", c.p("e"), lambda: os.listdir(c.p("e")))
    before = os.lstat(c.p("e/f3"))
    time.sleep(0.02)
    os.rename(c.p("e/f3"), c.p("d/f4"))
    after = os.lstat(c.p("d/f4"))
    o["file:renamed-ctime"] = after.st_ctime_ns != before.st_ctime_ns
    o["nlink"] = [os.stat(c.p(x)).st_nlink for x in ("d", "e")]
    os.close(fd)
    return o


SCENARIOS = {"ctimes": s_ctimes, "limits": s_limits, "editors": s_editors, "copy": s_copy, "big": s_big, "append_pwrite": s_append_pwrite, "mmap": s_mmap, "unlink_rename": s_unlink_rename,
             "links": s_links, "tools": s_tools, "attrs": s_attrs}


# ---------------------------------------------------------------- mount plumbing

class Vault:
    def __init__(self, binary, base):
        self.binary, self.base = binary, base
        self.store, self.mp, self.pf = base + "/store", base + "/mnt", base + "/pass"
        os.makedirs(self.mp)
        os.chmod(base, 0o700)
        open(self.pf, "w").write("correct horse battery")
        os.chmod(self.pf, 0o600)
        self.env = dict(os.environ, PHOTOVAULT_KDF_PROFILE="floor", XDG_RUNTIME_DIR=base,
                        PHOTOVAULT_DEVICE_SECRET=base + "/device-secret", HOME=base)
        self.pv("init", "--store", self.store)
        self.pv("user", "add", "alice", "--store", self.store, "--passfile", self.pf)
        self.mount()

    def pv(self, *args):
        r = subprocess.run([self.binary, *args], env=self.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"photovault {args}: {r.returncode} {r.stderr}")

    def mount(self):
        self.pv("mount", self.mp, "--store", self.store, "--user", "alice", "--passfile", self.pf, "--no-dbus")

    def remount(self):
        self.pv("unmount", self.mp)
        self.mount()

    def unmount(self):
        subprocess.run([self.binary, "unmount", self.mp], env=self.env, capture_output=True)
        subprocess.run(["fusermount3", "-uz", self.mp], capture_output=True)


def store_entries(store):
    """Entries of the account's tree underneath, internal ones (FORMAT.md sections 5, 6 and 8) left out."""
    users = os.path.join(store, "users")
    n = 0
    for top in os.listdir(users):
        for _, d, f in os.walk(os.path.join(users, top)):
            n += sum(1 for x in d + f if not (x in (".pvdir", ".pvmount") or x.startswith(".pvtmp-")
                                             or (x.startswith("~") and x.endswith((".name", ".link", ".holes")))))
    return n


def diff(a, b, path=""):
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append((f"{path}{k}", a.get(k, "<missing>"), b.get(k, "<missing>")))
            else:
                out += diff(a[k], b[k], f"{path}{k}/" if isinstance(a[k], dict) else f"{path}{k}")
    elif a != b:
        out.append((path, a, b))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", ".build", "debug", "photovault"))
    ap.add_argument("--only", default="")
    ap.add_argument("--base", default="/dev/shm")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    found = 0
    for name in names:
        base = tempfile.mkdtemp(prefix=f"pvdiff-{name}-", dir=args.base)
        scratch = base + "/scratch"
        os.makedirs(scratch)
        results = {}
        vault = None
        try:
            plain = base + "/plain"
            os.makedirs(plain)
            results["plain"] = SCENARIOS[name](Ctx(plain, lambda: None, "plain", scratch))
            shutil.rmtree(plain)
            vault = Vault(os.path.abspath(args.binary), base + "/v")
            results["mount"] = SCENARIOS[name](Ctx(vault.mp, vault.remount, "mount", scratch))
            # Nothing left in the store of removed or replaced files (an unlinked file that was
            # open, a file renamed over): as many entries underneath as in the view.
            visible = sum(len(d) + len(f) for _, d, f in os.walk(vault.mp))
            vault.unmount()
            vault = None
            results["mount"]["#store-entries"] = store_entries(base + "/v/store") - visible
            results["plain"]["#store-entries"] = 0
        except Exception as e:
            print(f"[{name}] ERROR {type(e).__name__}: {e}")
            found += 1
        finally:
            if vault:
                vault.unmount()
        if len(results) == 2:
            for key, pa, mo in diff(results["plain"], results["mount"]):
                why = EXPECTED.get((name, key))
                tag = f"expected ({why})" if why else "DIVERGES"
                found += 0 if why else 1
                print(f"[{name}] {tag}: {key}\n    plain: {pa}\n    mount: {mo}")
            if os.environ.get("PVDIFF_SHOW"):
                print(f"[{name}] mount observations: {results['mount']}")
            print(f"[{name}] done")
        shutil.rmtree(base, ignore_errors=True)
    print(f"{found} unexpected divergence(s)")


if __name__ == "__main__":
    main()
