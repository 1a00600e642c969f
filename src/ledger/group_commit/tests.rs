//! How a failed batch is classified.

use super::*;

#[test]
fn a_batch_fails_as_the_ledger_tells_it() {
    let kind = |e: WriteFault| classify(&e).fault;
    assert_eq!(
        kind(WriteFault::NotCommitted("disk full".into())),
        CommitFault::NotCommitted
    );
    assert_eq!(
        kind(WriteFault::Diverged("id taken".into())),
        CommitFault::Diverged
    );
    assert_eq!(
        kind(WriteFault::Unknown("I/O error at COMMIT".into())),
        CommitFault::Unknown
    );
}
