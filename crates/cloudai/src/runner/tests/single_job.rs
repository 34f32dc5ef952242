//! The single-sbatch mode of the runner: one job for every iteration, graded from each iteration's directory.

use super::*;

#[tokio::test(start_paused = true)]
async fn single_job_mode_submits_once_and_grades_every_iteration_from_its_directory() {
    let fake = Fake::single(&[("b", Behave { exit: 1, ..QUICK })]);
    let tests = test("a", "iterations = 2") + &test("b", &dep("start_post_comp", "a"));
    let (outcome, rows) = run_on(fake.clone(), &tests).await;
    // one job for the whole scenario, submitted once, polled to its end
    let submits: Vec<_> = fake
        .events()
        .into_iter()
        .filter(|e| e.what == "submit")
        .collect();
    assert_eq!(submits.len(), 1, "{:?}", fake.events());
    assert_eq!(fake.count("end", "a"), 1);
    // every iteration, dependencies first, graded from the exit status its directory holds
    assert_eq!(
        rows,
        vec![
            ("a".to_string(), 0, Status::Passed),
            ("a".to_string(), 1, Status::Passed),
            ("b".to_string(), 0, Status::Failed),
        ]
    );
    assert!(!outcome.interrupted);
    assert!(outcome
        .records
        .iter()
        .all(|r| r.job_id.as_deref() == Some("0")));
}

#[tokio::test(start_paused = true)]
async fn single_job_mode_cancels_its_one_job_when_stopped() {
    let fake = Fake::single(&[("a", Behave { run: None, ..QUICK })]);
    let tests = test("a", "iterations = 3");
    let (outcome, rows) = run_with(fake.clone(), &tests, stop_after(10)).await;
    let cancelled = fake.first("cancel", "a").expect("the job was cancelled");
    assert!((10..=11).contains(&cancelled), "{:?}", fake.events());
    assert!(outcome.interrupted);
    // no iteration wrote its status: each is CANCELLED, none graded
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|r| r.2 == Status::Cancelled), "{rows:?}");
}
