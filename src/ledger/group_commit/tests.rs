//! How a failed batch is classified.

use super::*;

#[test]
fn only_a_fault_that_says_so_counts_as_not_written() {
    let kind = |e: anyhow::Error| classify(&e).fault;
    let not = WriteFault::NotCommitted("disk full".into());
    assert_eq!(kind(not.into()), CommitFault::NotCommitted);
    let wrapped = anyhow::Error::from(WriteFault::Diverged("id taken".into())).context("batch");
    assert_eq!(kind(wrapped), CommitFault::Diverged);
    assert_eq!(
        kind(anyhow::anyhow!("a driver error")),
        CommitFault::Unknown
    );
}
