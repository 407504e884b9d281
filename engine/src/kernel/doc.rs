//! Domain documents: typed rows that domains keep under `ViewKey::Doc` as the JSON text of a
//! schema type, read in a decision and written by a projection.
//!
//! Adding a domain adds no view-key variant: it names its own row kinds (`signals.pm`, ...).
//! Does not decide or project anything itself.

use hookstate_schema::format::{decode_view_key, doc_prefix};
use hookstate_schema::{ViewKey, ViewRow};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::kernel::error::{Error, Result};
use crate::kernel::storage::ReadTxn;
use crate::kernel::view::{decode_row, read_row, ViewAccess};

/// The key of one document.
pub(crate) fn doc_key(scope: &str, kind: &str, id: &str) -> ViewKey {
    ViewKey::Doc { scope: scope.into(), kind: kind.into(), id: id.into() }
}

fn decode<T: DeserializeOwned>(key: &ViewKey, json: &str) -> Result<T> {
    serde_json::from_str(json).map_err(|e| Error::Corrupt(format!("document {key:?}: {e}")))
}

/// Reads one document in a decision.
pub(crate) fn read_doc<T: DeserializeOwned>(
    txn: &dyn ReadTxn,
    scope: &str,
    kind: &str,
    id: &str,
) -> Result<Option<T>> {
    let key = doc_key(scope, kind, id);
    match read_row(txn, &key)? {
        Some(ViewRow::Doc { json }) => decode(&key, &json).map(Some),
        Some(other) => Err(Error::Corrupt(format!("document {key:?} holds {other:?}"))),
        None => Ok(None),
    }
}

/// Reads every document of one kind in a scope, in id order.
pub(crate) fn read_docs<T: DeserializeOwned>(
    txn: &dyn ReadTxn,
    scope: &str,
    kind: &str,
) -> Result<Vec<(String, T)>> {
    let mut out = Vec::new();
    txn.views_with_prefix(&doc_prefix(scope, kind), &mut |key, row| {
        let (key, row) = decode_row(key, row)?;
        if let (ViewKey::Doc { id, .. }, ViewRow::Doc { json }) = (&key, row) {
            out.push((id.clone(), decode(&key, &json)?));
        }
        Ok(true)
    })?;
    Ok(out)
}

/// Visits the documents of one kind in a scope, in id order, until `visit` returns `false`: an
/// index read from its start reads only the rows it takes.
pub(crate) fn read_docs_while<T: DeserializeOwned>(
    txn: &dyn ReadTxn,
    scope: &str,
    kind: &str,
    visit: &mut dyn FnMut(String, T) -> bool,
) -> Result<()> {
    txn.views_with_prefix(&doc_prefix(scope, kind), &mut |key, row| {
        let (key, row) = decode_row(key, row)?;
        match (&key, row) {
            (ViewKey::Doc { id, .. }, ViewRow::Doc { json }) => {
                Ok(visit(id.clone(), decode(&key, &json)?))
            }
            _ => Ok(true),
        }
    })
}

/// Reads, in id order, the documents of one kind in a scope whose id starts with `id_prefix`,
/// stopping after `limit` (an index scanned from its first row).
pub(crate) fn scan_docs<T: DeserializeOwned>(
    txn: &dyn ReadTxn,
    scope: &str,
    kind: &str,
    id_prefix: &str,
    limit: usize,
) -> Result<Vec<(String, T)>> {
    let mut prefix = doc_prefix(scope, kind);
    prefix.extend_from_slice(id_prefix.as_bytes());
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    txn.views_with_prefix(&prefix, &mut |key, row| {
        let (key, row) = decode_row(key, row)?;
        if let (ViewKey::Doc { id, .. }, ViewRow::Doc { json }) = (&key, row) {
            out.push((id.clone(), decode(&key, &json)?));
        }
        Ok(out.len() < limit)
    })?;
    Ok(out)
}

/// Reads one document inside a projection. A row that does not decode reads as absent; `verify`
/// reports such a row as differing from a rebuild.
pub(crate) fn get_doc<T: DeserializeOwned>(views: &dyn ViewAccess, key: &ViewKey) -> Option<T> {
    match views.get(key) {
        Some(ViewRow::Doc { json }) => serde_json::from_str(json).ok(),
        _ => None,
    }
}

/// Writes one document inside a projection.
///
/// # Panics
/// Never in practice: serializing a plain schema struct to a string cannot fail.
pub(crate) fn put_doc<T: Serialize>(views: &mut dyn ViewAccess, key: ViewKey, value: &T) {
    let json = serde_json::to_string(value).expect("a schema struct serializes to JSON");
    views.put(key, ViewRow::Doc { json });
}

/// Edits one document (a default one when there is none): in place when a replay keeps it
/// decoded as its row ([`ViewAccess::edit_kept`]), else read with [`get_doc`] and written back
/// with [`ViewAccess::put_kept`]. For large documents that many events edit in turn.
pub(crate) fn edit_doc<T>(views: &mut dyn ViewAccess, key: &ViewKey, edit: impl FnOnce(&mut T))
where
    T: Serialize + DeserializeOwned + Default + Send + Sync + 'static,
{
    let mut edit = Some(edit);
    let edited = views.edit_kept(key, &mut |doc| {
        let (Some(doc), Some(edit)) = (doc.downcast_mut::<T>(), edit.take()) else {
            return false;
        };
        edit(doc);
        true
    });
    if edited {
        return;
    }
    let mut doc = get_doc::<T>(views, key).unwrap_or_default();
    if let Some(edit) = edit.take() {
        edit(&mut doc);
    }
    views.put_kept(key.clone(), Box::new(doc));
}

/// Reads every document of one kind in every scope: `(scope, id, document)`, in key order.
pub(crate) fn read_docs_all_scopes<T: DeserializeOwned>(
    txn: &dyn ReadTxn,
    kind: &str,
) -> Result<Vec<(String, String, T)>> {
    let mut out = Vec::new();
    txn.views_with_prefix(&hookstate_schema::format::doc_prefix_all(), &mut |key_bytes, row| {
        let key = decode_view_key(key_bytes).map_err(|e| Error::Corrupt(e.to_string()))?;
        if let ViewKey::Doc { scope, kind: found, id } = &key {
            if found == kind {
                let (_, row) = decode_row(key_bytes, row)?;
                if let ViewRow::Doc { json } = row {
                    out.push((scope.clone(), id.clone(), decode(&key, &json)?));
                }
            }
        }
        Ok(true)
    })?;
    Ok(out)
}
