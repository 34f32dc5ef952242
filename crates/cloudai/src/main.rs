fn main() {
    std::process::exit(cloudai::cli::main());
}

/// Release tarballs (`scripts/dist.sh`, built with `--cfg cloudai_dist`) link against glibc 2.17, which has no
/// `getrandom` (glibc 2.25); the standard library calls it by name. This forwards it to the system call, which
/// fails with ENOSYS on kernels before 3.17, where the standard library then reads /dev/urandom.
#[cfg(cloudai_dist)]
#[no_mangle]
pub unsafe extern "C" fn getrandom(
    buf: *mut libc::c_void,
    len: libc::size_t,
    flags: libc::c_uint,
) -> libc::ssize_t {
    // SAFETY: the caller's buffer and length go to the kernel unchanged, as glibc's wrapper passes them
    unsafe { libc::syscall(libc::SYS_getrandom, buf, len, flags) as libc::ssize_t }
}
