//! Events that carry a whole file (`SHELL.md` opened or adopted, a report, the template, a
//! ledger or a JSON file adopted) split into parts that each fit one event: the first part
//! replaces, the next ones append (`append: true`), so the projection builds the same file.
//!
//! Pure. Text splits at character boundaries, ledgers at line boundaries, JSON files between
//! fields.

use hookstate_schema::session::{JsonDoc, LineFile, SessionEvent};

/// The most text one event carries: well under the event limit (`EVENT_BYTES_MAX`, 72 KiB),
/// leaving room for the event's names and the record's envelope.
pub(crate) const PART_BYTES_MAX: usize = 48 * 1024;

/// Positions one `LinesDropped` event names at most (each is at most 9 bytes encoded).
pub(crate) const POSITIONS_MAX: usize = 4096;

/// `text` in parts of at most [`PART_BYTES_MAX`] bytes, cut at character boundaries.
fn text_parts(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while rest.len() > PART_BYTES_MAX {
        let mut cut = PART_BYTES_MAX;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        parts.push(rest[..cut].to_owned());
        rest = &rest[cut..];
    }
    parts.push(rest.to_owned());
    parts
}

/// A line file in parts: every part but the last ends with an empty tail (it stops at a line
/// break), so appending a part continues the lines. A single line longer than a part stays
/// whole (the codec bounds ledger lines).
fn line_parts(file: &LineFile) -> Vec<LineFile> {
    let mut parts = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut size = 0;
    let last = file.lines.len().saturating_sub(1);
    for (i, line) in file.lines.iter().enumerate() {
        if size + line.len() + 1 > PART_BYTES_MAX && !current.is_empty() && i < last {
            current.push(String::new());
            parts.push(LineFile { lines: std::mem::take(&mut current) });
            size = 0;
        }
        size += line.len() + 1;
        current.push(line.clone());
    }
    parts.push(LineFile { lines: current });
    parts
}

/// A JSON document in parts, between fields.
fn field_parts(doc: &JsonDoc) -> Vec<JsonDoc> {
    let mut parts = Vec::new();
    let mut current = Vec::new();
    let mut size = 0;
    for (key, value) in &doc.fields {
        let len = key.len() + value.len() + 4;
        if size + len > PART_BYTES_MAX && !current.is_empty() {
            parts.push(JsonDoc { fields: std::mem::take(&mut current), style: doc.style });
            size = 0;
        }
        size += len;
        current.push((key.clone(), value.clone()));
    }
    parts.push(JsonDoc { fields: current, style: doc.style });
    parts
}

fn texts(text: &str, make: impl Fn(String, bool) -> SessionEvent) -> Vec<SessionEvent> {
    text_parts(text).into_iter().enumerate().map(|(i, part)| make(part, i > 0)).collect()
}

/// Every event as events that each fit the event limit.
#[must_use]
pub(crate) fn split(events: Vec<SessionEvent>) -> Vec<SessionEvent> {
    let mut out = Vec::with_capacity(events.len());
    for event in events {
        match event {
            SessionEvent::ShellWritten { text, append: false } if text.len() > PART_BYTES_MAX => {
                out.extend(texts(&text, |text, append| SessionEvent::ShellWritten {
                    text,
                    append,
                }));
            }
            SessionEvent::ReportWritten { session_id, text, append: false }
                if text.len() > PART_BYTES_MAX =>
            {
                out.extend(texts(&text, |text, append| SessionEvent::ReportWritten {
                    session_id: session_id.clone(),
                    text,
                    append,
                }));
            }
            SessionEvent::TemplateAdopted { text, append: false }
                if text.len() > PART_BYTES_MAX =>
            {
                out.extend(texts(&text, |text, append| SessionEvent::TemplateAdopted {
                    text,
                    append,
                }));
            }
            SessionEvent::LedgerAdopted { ledger, file, append: false } => {
                let parts = line_parts(&file).into_iter().enumerate();
                out.extend(parts.map(|(i, file)| SessionEvent::LedgerAdopted {
                    ledger,
                    file,
                    append: i > 0,
                }));
            }
            SessionEvent::JsonAdopted { file, doc, append: false } => {
                let parts = field_parts(&doc).into_iter().enumerate();
                out.extend(parts.map(|(i, doc)| SessionEvent::JsonAdopted {
                    file: file.clone(),
                    doc,
                    append: i > 0,
                }));
            }
            SessionEvent::LinesDropped { positions } if positions.len() > POSITIONS_MAX => {
                out.extend(
                    positions
                        .chunks(POSITIONS_MAX)
                        .map(|p| SessionEvent::LinesDropped { positions: p.to_vec() }),
                );
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookstate_schema::session::{Ledger, Style};

    #[test]
    fn parts_rebuild_the_file() {
        let text = "é".repeat(PART_BYTES_MAX);
        let events = split(vec![SessionEvent::ShellWritten { text: text.clone(), append: false }]);
        assert!(events.len() > 1);
        let mut shell = None;
        for event in &events {
            super::super::shell::apply(&mut shell, event);
        }
        assert_eq!(shell.as_deref(), Some(text.as_str()));
        let lines: Vec<String> =
            (0..5000).map(|i| format!("{{\"n\":{i}}}")).chain([String::from("torn")]).collect();
        let file = LineFile { lines };
        let parts = split(vec![SessionEvent::LedgerAdopted {
            ledger: Ledger::Hypotheses,
            file: file.clone(),
            append: false,
        }]);
        assert!(parts.len() > 1);
        let mut rebuilt = LineFile::default();
        for part in parts {
            let SessionEvent::LedgerAdopted { file: part, append, .. } = part else { panic!() };
            if append {
                assert_eq!(rebuilt.lines.pop().as_deref(), Some(""), "a part ends at a break");
                rebuilt.lines.extend(part.lines);
            } else {
                rebuilt = part;
            }
        }
        assert_eq!(rebuilt, file);
        let doc = JsonDoc {
            fields: (0..64)
                .map(|i| (format!("k{i}"), format!("\"{}\"", "x".repeat(2000))))
                .collect(),
            style: Style::Pretty,
        };
        let parts = split(vec![SessionEvent::JsonAdopted {
            file: "state/conversations.json".into(),
            doc: doc.clone(),
            append: false,
        }]);
        let fields: Vec<(String, String)> = parts
            .into_iter()
            .flat_map(|p| match p {
                SessionEvent::JsonAdopted { doc, .. } => doc.fields,
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(fields, doc.fields);
    }
}
