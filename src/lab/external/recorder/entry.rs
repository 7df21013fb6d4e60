//! System-call entries: each call resolved (paths, descriptors), put in or out of scope,
//! refused before it runs when it would escape the scratch directory or the model cannot
//! represent it, or turned into the [`Pending`] its exit completes.
use super::*;

impl Recorder {
    /// A system call's entry, dispatched by family: data (open, write, fsync, truncate),
    /// then the name space (mkdir, unlink, rename, link), then what is refused or ignored.
    pub(super) fn on_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_open => self.open_entry(tid, AT_FDCWD, a[0], a[1], "open"),
            libc::SYS_creat => self.open_entry(
                tid,
                AT_FDCWD,
                a[0],
                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
                "creat",
            ),
            libc::SYS_openat => self.open_entry(tid, a[0] as i32, a[1], a[2], "openat"),
            libc::SYS_openat2 => {
                let how = read_memory(tid, a[2], 8)?;
                let flags = u64::from_ne_bytes(how.try_into().unwrap_or([0; 8]));
                self.open_entry(tid, a[0] as i32, a[1], flags, "openat2")
            }
            libc::SYS_write => self.write_entry(tid, a[0], None, Source::Buffer(a[1]), "write"),
            libc::SYS_pwrite64 => {
                self.write_entry(tid, a[0], Some(a[3]), Source::Buffer(a[1]), "pwrite64")
            }
            libc::SYS_writev => self.write_entry(
                tid,
                a[0],
                None,
                Source::Iovec {
                    address: a[1],
                    count: a[2],
                },
                "writev",
            ),
            libc::SYS_pwritev | libc::SYS_pwritev2 => {
                // pwritev2 with offset -1 writes at the file position, like writev.
                let offset = (a[3] as i64 >= 0).then_some(a[3]);
                self.write_entry(
                    tid,
                    a[0],
                    offset,
                    Source::Iovec {
                        address: a[1],
                        count: a[2],
                    },
                    "pwritev",
                )
            }
            libc::SYS_fsync | libc::SYS_fdatasync => self.fsync_entry(tid, a[0]),
            libc::SYS_sync | libc::SYS_syncfs => Ok(Pending::Op(TraceOp::SyncAll {
                entered_after: self.entry_stamp(),
            })),
            libc::SYS_truncate => {
                let path = self.path_arg(tid, AT_FDCWD, a[0])?;
                match self.scope.place(&path) {
                    Place::Inside(rel) => {
                        let inode = self.inode_at_path(&path, &rel, "truncate")?;
                        Ok(Pending::Op(TraceOp::Truncate { inode, len: a[1] }))
                    }
                    Place::Outside(path) => self.outside_write("truncate", &path),
                }
            }
            libc::SYS_ftruncate => match self.fd_place(tid, a[0])? {
                FdPlace::InsideFile(inode) => {
                    Ok(Pending::Op(TraceOp::Truncate { inode, len: a[1] }))
                }
                FdPlace::OutsideFile(path) => self.outside_write("ftruncate", &path),
                _ => Ok(Pending::Nothing),
            },
            _ => self.namespace_entry(tid, call),
        }
    }

    /// Entries that create, remove or rename names; anything else goes to [`Self::guard_entry`].
    fn namespace_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_mkdir => {
                self.entry_op(tid, AT_FDCWD, a[0], "mkdir", |path| TraceOp::Mkdir { path })
            }
            libc::SYS_mkdirat => self.entry_op(tid, a[0] as i32, a[1], "mkdirat", |path| {
                TraceOp::Mkdir { path }
            }),
            libc::SYS_rmdir => {
                self.entry_op(tid, AT_FDCWD, a[0], "rmdir", |path| TraceOp::Rmdir { path })
            }
            libc::SYS_unlink => self.entry_op(tid, AT_FDCWD, a[0], "unlink", |path| {
                TraceOp::Unlink { path }
            }),
            libc::SYS_unlinkat => {
                let remove_dir = a[2] & libc::AT_REMOVEDIR as u64 != 0;
                self.entry_op(tid, a[0] as i32, a[1], "unlinkat", |path| {
                    if remove_dir {
                        TraceOp::Rmdir { path }
                    } else {
                        TraceOp::Unlink { path }
                    }
                })
            }
            libc::SYS_rename => {
                self.rename_entry(tid, (AT_FDCWD, a[0]), (AT_FDCWD, a[1]), 0, "rename")
            }
            libc::SYS_renameat => {
                self.rename_entry(tid, (a[0] as i32, a[1]), (a[2] as i32, a[3]), 0, "renameat")
            }
            libc::SYS_renameat2 => self.rename_entry(
                tid,
                (a[0] as i32, a[1]),
                (a[2] as i32, a[3]),
                a[4],
                "renameat2",
            ),
            libc::SYS_link => self.link_entry(tid, (AT_FDCWD, a[0]), (AT_FDCWD, a[1])),
            libc::SYS_linkat => self.link_entry(tid, (a[0] as i32, a[1]), (a[2] as i32, a[3])),
            _ => self.guard_entry(tid, call),
        }
    }

    /// Entries the model refuses inside the scope (links it cannot follow, shared writable
    /// mappings, in-kernel copies, asynchronous I/O), `exec`, and everything else, ignored.
    fn guard_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_symlink => self.refuse_in_scope(tid, AT_FDCWD, a[1], "symlink"),
            libc::SYS_symlinkat => self.refuse_in_scope(tid, a[1] as i32, a[2], "symlinkat"),
            libc::SYS_mknod => self.refuse_in_scope(tid, AT_FDCWD, a[0], "mknod"),
            libc::SYS_mknodat => self.refuse_in_scope(tid, a[0] as i32, a[1], "mknodat"),
            libc::SYS_mmap => {
                let shared_writable = a[2] & libc::PROT_WRITE as u64 != 0
                    && a[3] & libc::MAP_SHARED as u64 != 0
                    && (a[4] as i32) >= 0;
                if shared_writable {
                    self.refuse_fd_in_scope(tid, a[4], "mmap", "a shared writable mapping")?;
                }
                Ok(Pending::Nothing)
            }
            libc::SYS_fallocate => {
                self.refuse_fd_in_scope(tid, a[0], "fallocate", "allocation")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_copy_file_range => {
                self.refuse_fd_in_scope(tid, a[2], "copy_file_range", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_sendfile => {
                self.refuse_fd_in_scope(tid, a[0], "sendfile", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_splice => {
                self.refuse_fd_in_scope(tid, a[2], "splice", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_io_uring_setup => Err(unmodelled("io_uring_setup", "asynchronous I/O")),
            libc::SYS_io_submit => Err(unmodelled("io_submit", "asynchronous I/O")),
            libc::SYS_execve | libc::SYS_execveat => Ok(Pending::Exec),
            _ => Ok(Pending::Nothing),
        }
    }

    fn path_arg(&self, tid: Pid, dirfd: i32, address: u64) -> Result<PathBuf, CrashTestError> {
        let raw = read_c_string(tid, address)?;
        resolve(tid, dirfd, &raw)
    }

    fn outside_write(&self, syscall: &'static str, path: &Path) -> Result<Pending, CrashTestError> {
        if self.scope.may_write_outside(path) {
            Ok(Pending::Nothing)
        } else {
            Err(CrashTestError::Escape {
                syscall,
                path: path.display().to_string(),
            })
        }
    }

    fn open_entry(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        flags: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let flags = flags as i32;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        if !writes {
            return Ok(Pending::Nothing);
        }
        let path = self.path_arg(tid, dirfd, address)?;
        let rel = match self.scope.place(&path) {
            Place::Inside(rel) => rel,
            Place::Outside(path) => {
                // Opening a device or an existing directory for writing changes no file.
                let special = std::fs::metadata(&path)
                    .map(|m| !m.is_file() && !m.is_dir())
                    .unwrap_or(false);
                if special {
                    return Ok(Pending::Nothing);
                }
                return self.outside_write(syscall, &path);
            }
        };
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(unmodelled(syscall, "O_TMPFILE (an unnamed file)"));
        }
        if flags & libc::O_DIRECT != 0 {
            return Err(unmodelled(syscall, "O_DIRECT (bypasses the page cache)"));
        }
        let existed = std::fs::symlink_metadata(&path).is_ok();
        Ok(Pending::Open {
            path: rel,
            existed,
            truncate: flags & libc::O_TRUNC != 0,
        })
    }

    fn write_entry(
        &mut self,
        tid: Pid,
        fd: u64,
        offset: Option<u64>,
        source: Source,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(inode) => {
                let info = fd_info(tid, fd)?;
                if info.flags & libc::O_DIRECT as u64 != 0 {
                    return Err(unmodelled(syscall, "a descriptor opened with O_DIRECT"));
                }
                let offset = match offset {
                    Some(offset) => offset,
                    None if info.flags & libc::O_APPEND as u64 != 0 => {
                        std::fs::metadata(format!("/proc/{tid}/fd/{fd}"))
                            .map_err(CrashTestError::io("sizing an O_APPEND file"))?
                            .len()
                    }
                    None => info.position,
                };
                Ok(Pending::Write {
                    inode,
                    offset,
                    source,
                })
            }
            FdPlace::OutsideFile(path) if self.scope.stdout_log.as_deref() == Some(&path) => {
                Ok(Pending::Stdout)
            }
            FdPlace::OutsideFile(path) => self.outside_write(syscall, &path),
            FdPlace::InsideDir(_) | FdPlace::Other => Ok(Pending::Nothing),
        }
    }

    /// The trace length now: what a durability call entered now can make durable.
    fn entry_stamp(&self) -> usize {
        self.trace.ops.len()
    }

    fn fsync_entry(&mut self, tid: Pid, fd: u64) -> Result<Pending, CrashTestError> {
        let entered_after = self.entry_stamp();
        Ok(match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(inode) => Pending::Op(TraceOp::Fsync {
                inode,
                entered_after,
            }),
            FdPlace::InsideDir(path) => Pending::Op(TraceOp::FsyncDir {
                path,
                entered_after,
            }),
            FdPlace::OutsideFile(_) | FdPlace::Other => Pending::Nothing,
        })
    }

    fn entry_op(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        syscall: &'static str,
        op: impl FnOnce(String) -> TraceOp,
    ) -> Result<Pending, CrashTestError> {
        let path = self.path_arg(tid, dirfd, address)?;
        match self.scope.place(&path) {
            Place::Inside(rel) if rel.is_empty() => Err(unmodelled(
                syscall,
                "an operation on the scratch directory itself",
            )),
            Place::Inside(rel) => Ok(Pending::Op(op(rel))),
            Place::Outside(path) => self.outside_write(syscall, &path),
        }
    }

    fn rename_entry(
        &mut self,
        tid: Pid,
        from: (i32, u64),
        to: (i32, u64),
        flags: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let from_path = self.path_arg(tid, from.0, from.1)?;
        let to_path = self.path_arg(tid, to.0, to.1)?;
        let (from_rel, to_rel) = match (self.scope.place(&from_path), self.scope.place(&to_path)) {
            (Place::Inside(a), Place::Inside(b)) => (a, b),
            (Place::Outside(_), Place::Outside(b)) => return self.outside_write(syscall, &b),
            (Place::Outside(a), Place::Inside(_)) => {
                return Err(CrashTestError::Escape {
                    syscall,
                    path: a.display().to_string(),
                })
            }
            (Place::Inside(_), Place::Outside(b)) => {
                return Err(CrashTestError::Escape {
                    syscall,
                    path: b.display().to_string(),
                })
            }
        };
        if flags & !(libc::RENAME_NOREPLACE as u64) != 0 {
            return Err(unmodelled(syscall, "RENAME_EXCHANGE or RENAME_WHITEOUT"));
        }
        if std::fs::symlink_metadata(&from_path)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            return Err(unmodelled(syscall, "a directory rename"));
        }
        Ok(Pending::Op(TraceOp::Rename {
            from: from_rel,
            to: to_rel,
            noreplace: flags & libc::RENAME_NOREPLACE as u64 != 0,
        }))
    }

    fn link_entry(
        &mut self,
        tid: Pid,
        from: (i32, u64),
        to: (i32, u64),
    ) -> Result<Pending, CrashTestError> {
        let from_path = self.path_arg(tid, from.0, from.1)?;
        let to_path = self.path_arg(tid, to.0, to.1)?;
        match (self.scope.place(&from_path), self.scope.place(&to_path)) {
            (Place::Inside(from_rel), Place::Inside(to_rel)) => {
                let inode = self.inode_at_path(&from_path, &from_rel, "link")?;
                Ok(Pending::Op(TraceOp::Link {
                    path: to_rel,
                    inode,
                }))
            }
            (_, Place::Outside(b)) => self.outside_write("link", &b),
            (Place::Outside(a), Place::Inside(_)) => Err(CrashTestError::Escape {
                syscall: "link",
                path: a.display().to_string(),
            }),
        }
    }

    fn refuse_in_scope(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let path = self.path_arg(tid, dirfd, address)?;
        match self.scope.place(&path) {
            Place::Inside(rel) => Err(unmodelled(syscall, &format!("creating {rel}"))),
            Place::Outside(path) => self.outside_write(syscall, &path),
        }
    }

    fn refuse_fd_in_scope(
        &mut self,
        tid: Pid,
        fd: u64,
        syscall: &'static str,
        what: &str,
    ) -> Result<(), CrashTestError> {
        match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(_) => Err(unmodelled(
                syscall,
                &format!("{what} of a file in the scratch directory"),
            )),
            FdPlace::OutsideFile(path) => self.outside_write(syscall, &path).map(drop),
            FdPlace::InsideDir(_) | FdPlace::Other => Ok(()),
        }
    }

    fn fd_place(&self, tid: Pid, fd: u64) -> Result<FdPlace, CrashTestError> {
        let link = format!("/proc/{tid}/fd/{fd}");
        let Ok(target) = std::fs::read_link(&link) else {
            return Ok(FdPlace::Other);
        };
        if !target.as_os_str().as_bytes().starts_with(b"/") {
            return Ok(FdPlace::Other); // pipe:, socket:, anon_inode:
        }
        let Ok(meta) = std::fs::metadata(&link) else {
            return Ok(FdPlace::Other);
        };
        let target = strip_deleted(target);
        match self.scope.place(&target) {
            Place::Inside(rel) if meta.is_dir() => Ok(FdPlace::InsideDir(rel)),
            Place::Inside(rel) if meta.is_file() => Ok(FdPlace::InsideFile(self.known_inode(
                (meta.dev(), meta.ino()),
                &rel,
                "write",
            )?)),
            Place::Outside(path) if meta.is_file() => Ok(FdPlace::OutsideFile(path)),
            _ => Ok(FdPlace::Other),
        }
    }
}
