//! Capabilities and securebits: what a sandboxed program is left with (none), and the probe
//! that tells whether this executor can drop them at all.

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability for good: [`bound_capabilities`], then [`clear_capabilities`].
pub(crate) fn drop_capabilities() -> std::io::Result<()> {
    bound_capabilities().and_then(|()| clear_capabilities())
}

/// Securebits locked (so exec as uid 0 grants nothing back), bounding and ambient sets emptied.
/// The capabilities in effect stay (the mounts and Landlock of a launch still need them), so
/// the program's process does this while it waits for its launch: some forty calls fewer on
/// a launch's path.
pub(crate) fn bound_capabilities() -> std::io::Result<()> {
    let last_os = || Err(std::io::Error::last_os_error());
    let bits = libc::SECBIT_NOROOT
        | libc::SECBIT_NOROOT_LOCKED
        | libc::SECBIT_NO_SETUID_FIXUP
        | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
        | libc::SECBIT_KEEP_CAPS_LOCKED
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE
        | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: these prctls take integer arguments only and change this thread's credentials.
    unsafe {
        if libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) != 0 {
            return last_os();
        }
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                    break; // past the kernel's last capability
                }
                return last_os();
            }
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return last_os();
        }
    }
    Ok(())
}

/// Effective, permitted and inheritable capabilities cleared, and checked.
pub(crate) fn clear_capabilities() -> std::io::Result<()> {
    let last_os = || Err(std::io::Error::last_os_error());
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: a v3 header with room for two data structs.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return last_os();
    }
    // SAFETY: as above.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return last_os();
    }
    if data
        .iter()
        .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0)
    {
        return Err(std::io::Error::other("capabilities were retained"));
    }
    Ok(())
}
