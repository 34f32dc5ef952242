//! The repository tests itself: a plain `git clone` with no reference folder beside it passes a compat test.
//! (Reference data lives in tests/data; nothing may read ../shared.)

use crate::common;

use std::process::Command;

#[test]
fn a_plain_clone_passes_a_compat_test_without_the_shared_folder() {
    let repo = common::repo();
    let Some((_tmp, clone)) = common::clone_head() else {
        return;
    };
    // a target directory of its own (kept between runs), so the outer test run's lock is not in the way
    let target = repo.join("target/plain-clone");
    let out = Command::new(env!("CARGO"))
        .current_dir(&clone)
        .args([
            "test",
            "--offline",
            "-q",
            "-p",
            "cloudai",
            "--test",
            "tests",
        ])
        .args([
            "compat_dry_run::slurm_nccl_with_hooks_matches_cloudai",
            "--",
            "--exact",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("CLOUDAI_SHARED_DIR")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
