//! The three writes of a push operation on its app row (module docs of
//! [`super`]): delete an existing row, update it (full or sparse payload,
//! the version check, the crdt merge) or insert it.

use super::*;

impl Target<'_> {
    /// Delete of an existing row: authorize the stored row, remove it and its
    /// scope entries, emit a delete tagged with the stored scopes.
    pub(super) fn delete(&self, stored: StoredRow) -> Result<StagedChange, Stop> {
        let partition = self.ctx.partition.as_str();
        let scopes = parse_stored_scopes_lenient(&stored.scopes_json);
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        let stored_row = self.stored_row_for_validator(&stored)?;
        self.validate(Op::Delete, None, stored_row.as_ref(), (Some(stored.version), None))?;
        let deleted = self.write(|| {
            let deleted = app_rows::delete_app_row(self.sql, partition, &self.op.row_id)?;
            row_scopes::delete_row_scopes(partition, &self.table.name, &self.op.row_id)?;
            Ok(deleted)
        })?;
        if !deleted {
            return Err(self.skipped());
        }
        if self.table.layout().columns.iter().any(|c| c.ty == ColumnType::BlobRef) {
            crate::store::blobs::refs::delete_row_blob_refs(partition, &self.table.name, &self.op.row_id)?;
        }
        Ok(self.change(Op::Delete, None, scopes, None, false))
    }

    /// The rejection of a write that changed no row although the row is
    /// locked: an app BEFORE trigger returned NULL (or a forced row-level
    /// security policy hid the row). The commit cannot be logged as stored.
    fn skipped(&self) -> Stop {
        self.error(
            ErrorCode::ConstraintViolation,
            format!("a trigger on synced table {:?} skipped the write of row {:?} (a BEFORE trigger returned NULL)", self.table.name, self.op.row_id),
        )
    }

    /// The version check of an update: SPEC 0.15.48 §6.2 for a full row
    /// (`baseVersion` 0 or ≠ stored ⇒ conflict), the column-level rule for a
    /// sparse one (module docs). `Err` terminates the commit.
    fn check_versions(&self, stored: &StoredRow, versions: &ColumnVersions, decoded: &Decoded) -> Result<(), Stop> {
        let Some(base) = self.op.base_version else { return Ok(()) };
        match self.form {
            PayloadForm::Full => {
                if base == 0 || base != stored.version {
                    return Err(StoredOpResult::conflict(self.op_index, stored.version, &stored.payload, None).into());
                }
                Ok(())
            }
            PayloadForm::Sparse => {
                if base > stored.version {
                    return Err(self.error(
                        ErrorCode::InvalidRequest,
                        format!("baseVersion {base} exceeds the stored server version {} (§6.2)", stored.version),
                    ));
                }
                let pk = self.table.primary_key_index;
                let layout = self.table.layout();
                let comparable =
                    |i: usize| i != pk && decoded.present(i) && layout.columns.get(i).is_some_and(|c| c.ty != ColumnType::Crdt);
                match versions.conflict(layout.len(), base, comparable) {
                    None => Ok(()),
                    Some(columns) => Err(StoredOpResult::conflict(
                        self.op_index,
                        stored.version,
                        &stored.payload,
                        Some(&columns),
                    )
                    .into()),
                }
            }
        }
    }

    /// The stored row's column versions (a malformed value reads as NULL,
    /// with a WARNING: [`ColumnVersions::read_or_reset`]).
    fn column_versions(&self, stored: &StoredRow) -> ColumnVersions {
        ColumnVersions::read_or_reset(
            stored.column_versions.as_deref(),
            stored.version,
            format_args!("{:?}/{:?}", self.table.name, self.op.row_id),
        )
    }

    /// Update of an existing row (§6.2, §3.4 rules 2 and 5; a sparse payload
    /// merges into the stored row).
    pub(super) fn update(&self, stored: StoredRow, decoded: Decoded, payload: &[u8]) -> Result<StagedChange, Stop> {
        let scopes = parse_stored_scopes_lenient(&stored.scopes_json);
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        let stored_row = self.decode_stored(&stored)?;
        let versions = self.column_versions(&stored);
        let mut row = decoded.row.clone();
        let mut reencode = false;
        match self.form {
            PayloadForm::Full => {
                self.check_versions(&stored, &versions, &decoded)?;
                // §3.4 rule 5: scope columns keep their stored values.
                for s in &self.table.scopes {
                    if !identical(&row[s.column_index], &stored_row[s.column_index]) {
                        row[s.column_index] = stored_row[s.column_index].clone();
                        reencode = true;
                    }
                }
            }
            PayloadForm::Sparse => {
                if let Some(s) = self
                    .table
                    .scopes
                    .iter()
                    .find(|s| decoded.present(s.column_index) && !identical(&row[s.column_index], &stored_row[s.column_index]))
                {
                    return Err(self.error(
                        ErrorCode::InvalidRequest,
                        format!(
                            "scope column {:?} of {:?} is immutable on update (§3.4): delete the row and insert it with the new scope",
                            self.table.columns[s.column_index].name, self.table.name
                        ),
                    ));
                }
                self.check_versions(&stored, &versions, &decoded)?;
                // Absent columns keep their stored values; what is logged is the merged row.
                for (i, slot) in row.iter_mut().enumerate() {
                    if !decoded.present(i) {
                        slot.clone_from(&stored_row[i]);
                    }
                }
                reencode = true;
            }
        }
        // §5.10.3: only the crdt values the payload carries are merged.
        reencode |= merge_crdt(self.table, &mut row, Some(&stored_row), &|i| !decoded.present(i), self.op_index)?;
        let blob_ids = row_blob_ids(self.table.layout(), &row);
        self.check_blobs(&blob_ids)?;
        let new_payload = if reencode {
            encode_row(self.table.layout(), &row).map_err(|e| {
                EngineError::internal(format!("re-encoding a merged, scope-stripped or crdt-merged row failed: {}", e.message))
            })?
        } else {
            payload.to_vec()
        };
        self.validate(Op::Upsert, Some(&row), Some(&stored_row), (Some(stored.version), Some(stored.version + 1)))?;
        let version = stored.version + 1;
        let pk = self.table.primary_key_index;
        let column_versions = match self.form {
            // A full row names every column: the values tell what changed.
            PayloadForm::Full => versions.next(row.len(), pk, version, |i| !identical(&row[i], &stored_row[i])),
            PayloadForm::Sparse => versions.next(row.len(), pk, version, |i| decoded.present(i)),
        };
        let scopes_text = scopes_json(&scopes);
        let present = decoded.present.as_deref();
        let updated = self.write(|| {
            app_rows::update_app_row(
                self.sql,
                &AppRowWrite {
                    partition: &self.ctx.partition,
                    row_id: &self.op.row_id,
                    values: &row,
                    version,
                    scopes_json: &scopes_text,
                    payload: &new_payload,
                    column_versions: column_versions.as_deref(),
                    present,
                },
            )
        })?;
        if !updated {
            return Err(self.skipped());
        }
        // The row's scopes are unchanged (rule 5): its sync_row_scopes entries stay.
        let old_ids = row_blob_ids(self.table.layout(), &stored_row);
        blob_refs::record_row(&self.ctx.partition, &self.table.name, &self.op.row_id, &old_ids, &blob_ids)?;
        Ok(self.change(Op::Upsert, Some(version), scopes, Some(new_payload), false))
    }

    /// The checks of a sparse upsert of an absent row before it may insert
    /// (module docs): authorization whenever the payload carries its scope
    /// values, then `sync.row_missing` / `sync.row_deleted`.
    fn check_sparse_insert(&self, decoded: &Decoded) -> Result<(), Stop> {
        let carries_scopes = self.table.scopes.iter().all(|s| decoded.present(s.column_index));
        let scopes = extract_scopes(self.table, &decoded.row).ok().filter(|_| carries_scopes);
        if let Some(scopes) = &scopes {
            authorize(self.table, scopes, &self.ctx.allowed, self.op_index)?;
        }
        if self.op.base_version.is_some_and(|b| b != 0) {
            return Err(match scopes {
                None => self.error(
                    ErrorCode::Forbidden,
                    format!("upsert into {:?} has no value for its scope columns (§3.4)", self.table.name),
                ),
                Some(_) => self.error(
                    ErrorCode::RowMissing,
                    "upsert with a non-zero baseVersion targets an absent row (§6.2)",
                ),
            });
        }
        if decoded.partial() {
            return Err(self.error(ErrorCode::RowMissing, "a partial payload targets an absent row (§6.3)"));
        }
        // A delete earlier in this request (its tombstone is written with the request's log);
        // a stored tombstone is probed by the insert (`insert`) — both after the partial check,
        // so a partial payload of a deleted row is `sync.row_missing` either way.
        if self.op.base_version.is_none() && (self.request_rows)(&self.table.name, &self.op.row_id) == Some(true) {
            return Err(self.row_deleted());
        }
        Ok(())
    }

    /// `sync.row_deleted`: an unversioned upsert of a row deleted within the
    /// retention horizon.
    fn row_deleted(&self) -> Stop {
        self.error(
            ErrorCode::RowDeleted,
            "the row was deleted: an upsert without baseVersion does not recreate it within the retention horizon (send baseVersion 0 to insert it again)",
        )
    }

    /// Insert of an absent row: authorize the payload's scopes (§3.4 step 2),
    /// `baseVersion ≠ 0` ⇒ `sync.row_missing` (only after authorization, so
    /// absence is not disclosed), write version 1 (its scope entries go with the request's log).
    pub(super) fn insert(&self, decoded: Decoded, payload: &[u8]) -> Result<StagedChange, Stop> {
        if self.form == PayloadForm::Sparse {
            self.check_sparse_insert(&decoded)?;
        }
        // The tombstone rule of an unversioned sparse upsert: probed by the insert statement
        // itself (a tombstoned row rejects the commit, which rolls the insert back), or first
        // under router statements (Citus).
        let probe = self.form == PayloadForm::Sparse && self.op.base_version.is_none();
        let router = crate::settings::router_statements();
        if probe && router && crate::store::log::tombstones::exists(&self.ctx.partition, &self.table.name, &self.op.row_id)? {
            return Err(self.row_deleted());
        }
        let probe_in_insert = probe && !router;
        let mut row = decoded.row;
        let partition = self.ctx.partition.as_str();
        let scopes = extract_scopes(self.table, &row).map_err(|variable| {
            self.error(
                ErrorCode::Forbidden,
                format!(
                    "insert into {:?} has no value for scope variable {variable:?} (§3.4)",
                    self.table.name
                ),
            )
        })?;
        authorize(self.table, &scopes, &self.ctx.allowed, self.op_index)?;
        if let Some((variable, why)) = scopes.iter().find_map(|(k, v)| unstorable(v).map(|why| (k, why))) {
            return Err(self.error(ErrorCode::InvalidRequest, format!("scope value of {variable:?} {why}")));
        }
        if self.op.base_version.is_some_and(|b| b != 0) {
            return Err(self.error(
                ErrorCode::RowMissing,
                "upsert with a non-zero baseVersion targets an absent row (§6.2)",
            ));
        }
        let merged = merge_crdt(self.table, &mut row, None, &|_| false, self.op_index)?;
        // A sparse payload is stored as the full row it carries (every column present).
        let payload = if merged || self.form == PayloadForm::Sparse {
            encode_row(self.table.layout(), &row).map_err(|e| {
                EngineError::internal(format!("encoding an inserted row failed: {}", e.message))
            })?
        } else {
            payload.to_vec()
        };
        let blob_ids = row_blob_ids(self.table.layout(), &row);
        self.check_blobs(&blob_ids)?;
        self.validate(Op::Upsert, Some(&row), None, (None, Some(1)))?;
        let scopes_text = scopes_json(&scopes);
        let tombstoned = self.write(|| {
            app_rows::insert_app_row(
                self.sql,
                &AppRowWrite {
                    partition,
                    row_id: &self.op.row_id,
                    values: &row,
                    version: 1,
                    scopes_json: &scopes_text,
                    payload: &payload,
                    column_versions: None,
                    present: None,
                },
                probe_in_insert,
            )
        })?;
        match tombstoned {
            None => return Err(self.skipped()),
            Some(true) => return Err(self.row_deleted()),
            Some(false) => {}
        }
        // The row's sync_row_scopes entries are written with the request's log
        // (`StagedChange::inserted`; a leftover one is kept, ON CONFLICT).
        blob_refs::record_row(partition, &self.table.name, &self.op.row_id, &[], &blob_ids)?;
        Ok(self.change(Op::Upsert, Some(1), scopes, Some(payload), true))
    }
}
