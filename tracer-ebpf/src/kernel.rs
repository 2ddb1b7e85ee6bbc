//! Reading kernel structures at the offsets user space found in the
//! kernel's BTF ([`KernelOffsets`](tracer_common::kernel::KernelOffsets)),
//! so no kernel layout is compiled in.

use aya_ebpf::helpers::{bpf_probe_read_kernel, generated::bpf_get_current_task};
use tracer_common::kernel::{NO_OFFSET, PF_KTHREAD, mode};

use crate::count;
use tracer_common::stats::Stat;

/// One field of the `KERNEL_OFFSETS` global (read alone: the whole struct
/// would be copied onto the small eBPF stack).
macro_rules! off {
    ($field:ident) => {
        // SAFETY: a valid static; volatile so the loader's value is read.
        unsafe { core::ptr::read_volatile(&crate::KERNEL_OFFSETS.$field) }
    };
}
pub(crate) use off;

/// Reads a `T` at `base + offset` of kernel memory; `None` when the offset
/// is absent, `base` is null or the memory cannot be read.
#[inline(always)]
pub fn read<T>(base: u64, offset: u32) -> Option<T> {
    if base == 0 || offset == NO_OFFSET {
        return None;
    }
    // SAFETY: the helper checks the address; a fault returns an error.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T) }.ok()
}

/// The current task (`struct task_struct *`).
#[inline(always)]
pub fn current_task() -> u64 {
    // SAFETY: helper without preconditions.
    unsafe { bpf_get_current_task() }
}

/// Whether the current task is a kernel thread (page-cache writeback, a
/// loop device's worker); `None` when its flags cannot be read.
#[inline(always)]
pub fn current_is_kthread() -> Option<bool> {
    let flags: u32 = read(current_task(), off!(task_flags))?;
    Some(flags & PF_KTHREAD != 0)
}

/// The open file behind a descriptor of the current process.
#[derive(Clone, Copy)]
pub struct FdFile {
    /// `struct file *`.
    pub file: u64,
    /// The inode's `S_IFMT` bits.
    pub kind: u16,
    /// The file system's device (a block device file's own device).
    pub dev: u32,
}

/// Whether an inode of `S_IFMT` bits `kind` is storage: a regular file,
/// directory or block device.
#[inline(always)]
pub fn is_storage(kind: u16) -> bool {
    matches!(kind, mode::S_IFREG | mode::S_IFDIR | mode::S_IFBLK)
}

/// The file behind descriptor `fd` of the current process: its fd table
/// entry, inode type and device (`task->files->fdt->fd[fd]->f_inode`).
#[inline(always)]
pub fn fd_file(fd: i64) -> Option<FdFile> {
    if fd < 0 {
        return None;
    }
    let Some(file) = fd_file_ptr(fd as u64) else {
        return None;
    };
    let inode: u64 = read(file, off!(file_inode))?;
    let Some(imode) = read::<u16>(inode, off!(inode_mode)) else {
        count(Stat::KernelUnreadable);
        return None;
    };
    let kind = imode & mode::S_IFMT;
    let dev = if kind == mode::S_IFBLK {
        read::<u32>(inode, off!(inode_rdev)).unwrap_or(0)
    } else {
        let sb: u64 = read(inode, off!(inode_sb)).unwrap_or(0);
        read::<u32>(sb, off!(sb_dev)).unwrap_or(0)
    };
    Some(FdFile { file, kind, dev })
}

#[inline(always)]
fn fd_file_ptr(fd: u64) -> Option<u64> {
    let files: u64 = read(current_task(), off!(task_files))?;
    let fdt: u64 = read(files, off!(files_fdt))?;
    let (max_fds_off, fd_off) = (off!(fdt_max_fds), off!(fdt_fd));
    // `max_fds` then `fd` in one read where they are 8 bytes apart (every
    // kernel since 2.6): one probe read fewer on a hot path.
    let (max_fds, array) = if fd_off == max_fds_off.wrapping_add(8) {
        let pair: [u64; 2] = read(fdt, max_fds_off)?;
        (pair[0] as u32, pair[1])
    } else {
        (read::<u32>(fdt, max_fds_off)?, read::<u64>(fdt, fd_off)?)
    };
    if fd >= u64::from(max_fds) {
        return None;
    }
    let file: u64 = read(array + 8 * fd, 0)?;
    (file != 0).then_some(file)
}

/// The `struct sock *` of socket file `file`
/// (`file->private_data->sk`).
#[inline(always)]
pub fn socket_sock(file: u64) -> Option<u64> {
    let socket: u64 = read(file, off!(file_private_data))?;
    let sk: u64 = read(socket, off!(socket_sk))?;
    (sk != 0).then_some(sk)
}
