//! Reading a stopped tracee: its memory (`/proc/TID/mem`), strings, iovecs and
//! descriptors (`/proc/TID/fd/N`), and resolving its path arguments.
use super::*;

pub(super) enum FdPlace {
    InsideFile(InodeId),
    InsideDir(String),
    OutsideFile(PathBuf),
    Other,
}

pub(super) fn unmodelled(syscall: &'static str, detail: &str) -> CrashTestError {
    CrashTestError::Unmodelled {
        syscall,
        detail: detail.to_owned(),
        followed: FOLLOWED,
    }
}

pub(super) fn strip_deleted(path: PathBuf) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    match bytes.strip_suffix(b" (deleted)") {
        Some(stripped) => PathBuf::from(std::ffi::OsStr::from_bytes(stripped)),
        None => path,
    }
}

/// The `pos:` and `flags:` lines of `/proc/TID/fdinfo/FD`.
pub(super) struct FdInfo {
    pub(super) position: u64,
    pub(super) flags: u64,
}

pub(super) fn fd_info(tid: Pid, fd: u64) -> Result<FdInfo, CrashTestError> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}"))
        .map_err(CrashTestError::io("reading a descriptor's position"))?;
    let field = |name: &str, radix: u32| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| u64::from_str_radix(value.trim(), radix).ok())
    };
    match (field("pos:", 10), field("flags:", 8)) {
        (Some(position), Some(flags)) => Ok(FdInfo { position, flags }),
        _ => Err(CrashTestError::Io {
            context: "reading a descriptor's position".to_owned(),
            source: std::io::Error::other("fdinfo without pos or flags"),
        }),
    }
}

/// Reads `len` bytes of a tracee's memory.
pub(super) fn read_memory(tid: Pid, address: u64, len: u64) -> Result<Vec<u8>, CrashTestError> {
    let len = usize::try_from(len).map_err(|_| CrashTestError::TraceOverLimits {
        what: "bytes in one call",
        limit: usize::MAX as u64,
    })?;
    let mem = std::fs::File::open(format!("/proc/{tid}/mem"))
        .map_err(CrashTestError::io("opening the writer's memory"))?;
    let mut out = vec![0u8; len];
    mem.read_exact_at(&mut out, address)
        .map_err(CrashTestError::io("reading the writer's memory"))?;
    Ok(out)
}

/// A NUL-terminated path argument (at most PATH_MAX bytes).
pub(super) fn read_c_string(tid: Pid, address: u64) -> Result<Vec<u8>, CrashTestError> {
    const PATH_MAX: usize = 4096;
    let mem = std::fs::File::open(format!("/proc/{tid}/mem"))
        .map_err(CrashTestError::io("opening the writer's memory"))?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < PATH_MAX {
        let at = address.saturating_add(out.len() as u64);
        let read = mem
            .read_at(&mut chunk, at)
            .map_err(CrashTestError::io("reading a path argument"))?;
        if read == 0 {
            break;
        }
        if let Some(nul) = chunk[..read].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..read]);
    }
    Err(CrashTestError::TraceOverLimits {
        what: "path length",
        limit: PATH_MAX as u64,
    })
}

/// The bytes a write call wrote (`written` of them).
pub(super) fn read_source(
    tid: Pid,
    source: Source,
    written: u64,
) -> Result<Vec<u8>, CrashTestError> {
    match source {
        Source::Buffer(address) => read_memory(tid, address, written),
        Source::Iovec { address, count } => {
            const IOV_MAX: u64 = 1024;
            let count = count.min(IOV_MAX);
            let table = read_memory(tid, address, count * 16)?;
            let mut out = Vec::new();
            for entry in table.chunks_exact(16) {
                let remaining = written - out.len() as u64;
                if remaining == 0 {
                    break;
                }
                let base = u64::from_ne_bytes(entry[..8].try_into().unwrap_or([0; 8]));
                let len = u64::from_ne_bytes(entry[8..].try_into().unwrap_or([0; 8]));
                out.extend(read_memory(tid, base, len.min(remaining))?);
            }
            Ok(out)
        }
    }
}

/// An absolute, lexically normalised path for a path argument.
pub(super) fn resolve(tid: Pid, dirfd: i32, raw: &[u8]) -> Result<PathBuf, CrashTestError> {
    let path = Path::new(std::ffi::OsStr::from_bytes(raw));
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        let base = if dirfd == AT_FDCWD {
            format!("/proc/{tid}/cwd")
        } else {
            format!("/proc/{tid}/fd/{dirfd}")
        };
        let base = std::fs::read_link(&base)
            .map_err(CrashTestError::io("resolving a relative path argument"))?;
        strip_deleted(base).join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}
