import CHaulSystem

/// Which open files are on a local disk's file system: one whose writes the page cache takes
/// at memory speed. Network and FUSE file systems (NFS, SMB, sshfs, 9p) answer at their
/// own pace, and so does anything not named here.
enum LocalDisk {
    /// The file systems known to be local (`statfs`'s `f_type`): ext2/3/4, XFS, Btrfs, tmpfs,
    /// F2FS, ZFS, bcachefs, JFS, ReiserFS, NILFS, and overlayfs (a container's root, over
    /// local layers).
    static let fileSystems: Set<UInt32> = [
        0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010, 0x2FC1_2FC1, 0xCA45_1A4E,
        0x3153_464A, 0x5265_4973, 0x3434, 0x794C_7630,
    ]

    /// Whether the file open at `descriptor` is on one of ``fileSystems``.
    static func holds(_ descriptor: Int32) -> Bool {
        fileSystems.contains(UInt32(truncatingIfNeeded: chaul_file_system_type(descriptor)))
    }
}
