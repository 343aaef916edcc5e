//! The parent-texts engine ([`Fetch::ParentTexts`](crate::feeds::Fetch::ParentTexts)):
//! the text of each part of the parent table's recent documents of the
//! configured companies that is not stored yet, each asked once.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use futures::{FutureExt, StreamExt};

use super::{Member, Progress, Shortfall, SyncError, Syncer, Turn, upstream_error};
use crate::feeds::ParentTexts;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, UpstreamError, encode};

/// What one document's parts came to.
#[derive(Default)]
struct Asked {
    /// Parts asked for, and those whose text is now stored.
    parts: u64,
    stored: u64,
    /// 404s, noted.
    problems: Vec<String>,
    /// The checkpoints of the parts served empty.
    empty: Vec<Checkpoint>,
}

/// The text of a body the service declared JSON: the specification's
/// "plain-text string" served as a JSON string is the string, not its quotes
/// and escapes; declared JSON but not a JSON string (cut short, or another
/// shape), it is not a text to store: the body and why, for quarantine. A
/// body declared otherwise is the text as it came.
fn json_string_text(media_type: Option<&str>, body: String) -> Result<String, (String, String)> {
    let declared_json = media_type.is_some_and(|t| t == "application/json" || t.ends_with("+json"));
    if !declared_json {
        return Ok(body);
    }
    serde_json::from_str::<String>(&body).map_err(|e| {
        (
            body.clone(),
            format!("text declared application/json is not a JSON string: {e}"),
        )
    })
}

/// The checkpoint partition of a part whose text was served empty.
fn empty_partition(id: &str, part: &str) -> String {
    format!("empty:{id}:{part}")
}

/// A part whose text was served empty: how many times, and when it is
/// asked again (`3@2026-11-27T12:00:00+00:00`). The wait doubles from six
/// hours, to a week at most: a text the service has not extracted yet comes
/// within hours, and one it never will costs a request a week.
#[derive(Debug, Clone, Copy, PartialEq)]
struct EmptyText {
    tries: u32,
    next_at: DateTime<Utc>,
}

impl EmptyText {
    fn after(tries: u32, now: DateTime<Utc>) -> EmptyText {
        let hours = (6i64 << tries.saturating_sub(1).min(5)).min(7 * 24);
        EmptyText {
            tries,
            next_at: now + Duration::hours(hours),
        }
    }

    fn parse(cursor: &str) -> Option<EmptyText> {
        let (tries, at) = cursor.split_once('@')?;
        Some(EmptyText {
            tries: tries.parse().ok()?,
            next_at: at.parse().ok()?,
        })
    }
}

impl std::fmt::Display for EmptyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.tries, self.next_at.to_rfc3339())
    }
}

impl Syncer {
    /// Parts of documents of the last `text_days` (all without), newest
    /// first, so a quota wall leaves a gap only at the old end: coded parts
    /// one by one, the uncoded part ('') without the part query.
    pub(super) async fn run_parent_texts(
        &self,
        pipeline: &Pipeline,
        feed: &ParentTexts,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let since = pipeline
            .params
            .text_days
            .map(|days| self.clock.now().date_naive() - Duration::days(i64::from(days)));
        let keys: Vec<String> = members.into_iter().map(|m| m.key).collect();
        let (parent, parts, texts) = (feed.parent, feed.parts, feed.texts);
        let missing = self
            .sink
            .call(move |s| s.missing_parts(parent, parts, texts, &keys, since))
            .await??;
        // A text served empty is asked again only once its wait is over.
        let now = self.clock.now();
        let empties: HashMap<String, EmptyText> = self
            .checkpoints_of(pipeline)
            .await?
            .into_iter()
            .filter_map(|(partition, c)| Some((partition, EmptyText::parse(&c.cursor)?)))
            .collect();
        let (missing, waiting): (Vec<_>, Vec<_>) = missing
            .into_iter()
            .partition(|(_, id, part)| empties.get(&empty_partition(id, part)).is_none_or(|e| e.next_at <= now));
        if !waiting.is_empty() {
            tracing::info!(
                message = "Texts the service served empty wait before they are asked again.",
                waiting = waiting.len()
            );
        }
        let empties = &empties;
        let fetch = |missing| {
            self.document_texts(Turn { pipeline, run_id }, feed, empties, missing)
                .boxed()
        };
        // Each made when its turn comes: see `run_per_company`.
        let mut results = futures::stream::iter(missing)
            .map(fetch)
            .buffered(self.config.upstream.concurrency);
        let (mut parts_asked, mut parts_stored) = (0u64, 0u64);
        let mut outcome = Ok(());
        while let Some((rows, listed, asked, result)) = results.next().await {
            if !listed.is_empty() {
                tracing::info!(message = "Document listed its coded parts; fetched each.", parts = ?listed);
            }
            progress.problems.extend(asked.problems);
            (parts_asked, parts_stored) = (parts_asked + asked.parts, parts_stored + asked.stored);
            parts_stored += rows.quarantined.len() as u64;
            self.commit_pages(run_id, vec![rows], asked.empty, progress, false)
                .await?;
            match result {
                Ok(paused) => progress.backfill_paused |= paused,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // Every part asked for is held against what is stored of it now.
        if parts_stored < parts_asked {
            progress.shortfalls.push(Shortfall {
                what: format!(
                    "texts of the parts listed by {}'s rows and asked for ({}; an empty text is asked again after a wait)",
                    feed.parent.table.name, pipeline.route
                ),
                expected: parts_asked,
                stored: parts_stored,
            });
        }
        outcome
    }

    /// One document's missing text (`part`), or, when the uncoded part is
    /// refused with the document's list of coded parts, each coded part not
    /// stored yet: the rows read, the parts the document listed, what was
    /// asked, and whether the quota's backfill share stopped it (`Ok(true)`).
    async fn document_texts(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &ParentTexts,
        empties: &HashMap<String, EmptyText>,
        (company, id, part): (String, String, String),
    ) -> (Rows, Vec<String>, Asked, Result<bool, SyncError>) {
        let read = feed.read;
        let path = pipeline
            .route
            .replace("{company}", &encode(&company))
            .replace("{accession}", &encode(&id));
        let mut listed = Vec::new();
        let mut rows = Rows::new(run_id, &path, self.clock.now());
        let mut asked = Asked::default();
        let mut queue = vec![part];
        while let Some(part) = queue.pop() {
            if !self.client.may_backfill() {
                return (rows, listed, asked, Ok(true));
            }
            asked.parts += 1;
            let route = if part.is_empty() {
                path.clone()
            } else {
                format!("{path}?{}={}", feed.part_query, encode(&part))
            };
            let fetched = self
                .client
                // A whole body that is not UTF-8 is the service's bad
                // record, not a failed request: quarantined, not retried.
                .get(&route, Access::Key, |body| {
                    Ok(String::from_utf8(body.to_vec()).map_err(|e| {
                        (
                            String::from_utf8_lossy(body).into_owned(),
                            format!("text is not UTF-8: {e}"),
                        )
                    }))
                })
                .await;
            match fetched {
                Ok(f) => {
                    rows.route = route;
                    let text = match f.value {
                        Ok(text) => json_string_text(f.media_type.as_deref(), text),
                        bad => bad,
                    };
                    match text {
                        // Item text never changes once served: an empty
                        // one is a text not ready yet, not the text.
                        Ok(text) if text.trim().is_empty() => {
                            let partition = empty_partition(&id, &part);
                            let tries = empties.get(&partition).map_or(0, |e| e.tries) + 1;
                            asked.empty.push(Checkpoint {
                                pipeline: pipeline.name.clone(),
                                cursor: EmptyText::after(tries, self.clock.now()).to_string(),
                                partition,
                            });
                        }
                        Ok(text) => {
                            read(&mut rows, &text, &company, &id, &part);
                            asked.stored += 1;
                        }
                        Err((lossy, why)) => rows.quarantine(&lossy, why),
                    }
                }
                // The document has coded parts after all: the 400 lists them.
                Err(UpstreamError::BadRequest { body, .. }) if part.is_empty() && body.items.is_some() => {
                    asked.parts -= 1;
                    listed = body.items.unwrap_or_default();
                    match self.stored_parts_of(feed, &id).await {
                        Ok(stored) => {
                            queue.extend(listed.iter().filter(|p| !p.is_empty() && !stored.contains(*p)).cloned())
                        }
                        Err(e) => return (rows, listed, asked, Err(e)),
                    }
                }
                // A refused part (a 404, a 402, a body past the size cap) is
                // missing from what the document counts; the others go on.
                Err(e) if e.is_refusal() => {
                    if let Ok(refusal) = e.into_refusal() {
                        asked.problems.push(refusal.to_string());
                    }
                }
                Err(e) => return (rows, listed, asked, Err(upstream_error(e))),
            }
        }
        (rows, listed, asked, Ok(false))
    }

    /// The parts of document `id` whose texts are already stored.
    async fn stored_parts_of(
        &self,
        feed: &ParentTexts,
        id: &str,
    ) -> Result<std::collections::HashSet<String>, SyncError> {
        let (texts, id) = (feed.texts, id.to_owned());
        Ok(self.sink.call(move |s| s.stored_parts_of(texts, &id)).await??)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_served_as_a_json_string_is_the_string() {
        let quoted = r#""Item 2.02.\n\nResults \"as filed\".""#.to_owned();
        assert_eq!(
            json_string_text(Some("application/json"), quoted.clone()),
            Ok("Item 2.02.\n\nResults \"as filed\".".to_owned())
        );
        assert_eq!(json_string_text(Some("text/plain"), quoted.clone()), Ok(quoted.clone()));
        assert_eq!(json_string_text(None, quoted.clone()), Ok(quoted));
        // Declared JSON, cut short on the way: not a text to store.
        let cut = r#""Item 8.01. Other ev"#.to_owned();
        let (body, why) = json_string_text(Some("application/json"), cut.clone()).unwrap_err();
        assert_eq!(body, cut);
        assert!(why.contains("not a JSON string"), "{why}");
    }

    #[test]
    fn an_empty_text_waits_longer_each_time_up_to_a_week() {
        let now: DateTime<Utc> = "2026-11-25T23:00:00Z".parse().unwrap();
        let waits: Vec<i64> = (1..=8)
            .map(|tries| (EmptyText::after(tries, now).next_at - now).num_hours())
            .collect();
        assert_eq!(waits, [6, 12, 24, 48, 96, 168, 168, 168]);
        let e = EmptyText::after(3, now);
        assert_eq!(EmptyText::parse(&e.to_string()), Some(e));
        assert_eq!(EmptyText::parse("garbage"), None);
    }
}
