//! Why a run could not finish: the one error the commands report, each
//! kind with its exit code of the operator contract.

use crate::bookkeeping::RESUMES;
use crate::config::ConfigError;
use crate::sink::SinkError;

/// Why a run could not finish; each maps to an exit code of the operator contract.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Unauthenticated(String),
    /// The service sent a request elsewhere (a redirect to another origin):
    /// every request would, so the run stops; `upstream.base_url` must change.
    #[error("{0}")]
    Misdirected(String),
    /// The process was told to stop (a signal): what was received is
    /// committed, and the next run resumes from there.
    #[error("stopped by a signal; what was received is committed and the next run resumes from there")]
    Interrupted,
    #[error("{message}")]
    QuotaExhausted { message: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{failed} pipeline(s) failed: {names}")]
    PipelinesFailed { failed: usize, names: String },
    /// `--max-requests` was reached: not a failure, the next run resumes.
    #[error("the request budget of {limit} requests (--max-requests) is spent; {RESUMES}")]
    BudgetSpent { limit: u64 },
    /// The pipeline's share of the quota left is spent: not a failure; the
    /// run goes on with the next, and the next run starts with this one.
    #[error("its share of the quota left ({cap} requests) is spent; {RESUMES}, this pipeline among the first")]
    ShareSpent { cap: u64 },
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0} (the warehouse has every row; the next publish resumes)")]
    Lake(Box<crate::lake::LakeError>),
    /// A 200 that could not be read: its body is quarantined, and nothing
    /// stored is replaced or deleted on the strength of it.
    #[error("{}: {} (the body is kept in _sync_quarantine)", .0.route, .0.error)]
    Unreadable(Box<crate::records::Quarantined>),
    /// Responses of a per-company route that could not be read: the other
    /// companies went on; the bodies are quarantined.
    #[error("{count} unreadable response(s) kept in _sync_quarantine, the first {first}")]
    UnreadableParts { count: usize, first: String },
    #[error("{0}")]
    Other(String),
}

impl From<crate::lake::LakeError> for SyncError {
    fn from(e: crate::lake::LakeError) -> Self {
        SyncError::Lake(Box::new(e))
    }
}

impl SyncError {
    /// Whether a pipeline stopped by this left work its next run picks up at
    /// once: a wall, a budget, a share or a stop, and what only the operator
    /// can fix (the credential, the address), which the next run is for.
    pub fn resumes(&self) -> bool {
        matches!(
            self,
            SyncError::QuotaExhausted { .. }
                | SyncError::Interrupted
                | SyncError::BudgetSpent { .. }
                | SyncError::ShareSpent { .. }
                | SyncError::Unauthenticated(_)
                | SyncError::Misdirected(_)
        )
    }

    /// The process exit code for this error (operator contract).
    pub fn exit_code(&self) -> u8 {
        match self {
            SyncError::Config(_) | SyncError::Unauthenticated(_) | SyncError::Misdirected(_) => 2,
            SyncError::Lake(e) if matches!(**e, crate::lake::LakeError::Location { .. }) => 2,
            SyncError::Sink(crate::sink::SinkError::NewerLayout { .. }) => 2,
            SyncError::QuotaExhausted { .. } => 75,
            _ => 1,
        }
    }
}

/// An error and its causes on one line, as `{:#}` prints them, leaving out a
/// cause whose text the message before it already quotes: most of the
/// project's errors name their source in their own message.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
    }
    line
}
