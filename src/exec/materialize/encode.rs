//! Encoding a tensor a slab at a time: pipelined on the pool, teed into
//! the prepared exports that hold it too (or a blob under its key), with
//! the siblings claimed for it.

use super::destinations::{Open, Place};
use super::*;

/// Who keeps a tensor's encoded bytes for the rest of the run and later runs.
#[derive(Clone, Copy)]
pub(super) enum Holder {
    /// A blob under its key, whatever else is written: a step that keeps
    /// its result, a conversion sliced after it is stored.
    Blob,
    /// The prepared exports it is written into (the encoder's own output
    /// at `own` among them, if prepared), each recording it when it
    /// commits; a blob only when no prepared export holds it.
    Exports { own: Option<Place> },
}

/// Where one tensor's encoded bytes go besides the encoder's own writer.
struct Copies {
    /// The other prepared exports' places for it.
    places: Vec<Open>,
    /// Every prepared place these bytes fill.
    filled: Vec<Place>,
    keep: Keep,
}

enum Keep {
    Blob(Box<dyn BlobWriter>),
    /// Hashed as written, for the exports that hold the bytes to record.
    InExports(Box<blake3::Hasher>),
    /// The store keeps no results.
    Nothing,
}

impl Copies {
    fn of(m: &Materializer<'_>, tensor: &Tensor, holder: Holder) -> Result<Copies, MaterializeError> {
        let own = match holder {
            Holder::Exports { own } => own,
            Holder::Blob => None,
        };
        let (places, mine) = m.destinations.open(&tensor.key, own);
        let mut filled: Vec<Place> = places.iter().map(|p| p.place).collect();
        filled.extend(own.filter(|_| mine));
        let keep = match holder {
            Holder::Exports { .. } if !filled.is_empty() => Keep::InExports(Box::default()),
            _ => m.store.blob_writer()?.map_or(Keep::Nothing, Keep::Blob),
        };
        Ok(Copies { places, filled, keep })
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        for place in &mut self.places {
            place.file.write_all_at(bytes, place.offset)?;
            place.offset += bytes.len() as u64;
        }
        match &mut self.keep {
            Keep::Blob(blob) => blob.write_all(bytes),
            Keep::InExports(hasher) => {
                hasher.update(bytes);
                Ok(())
            }
            Keep::Nothing => Ok(()),
        }
    }

    /// Commits the blob (recorded under the tensor's key) and tells the
    /// prepared exports their places hold the bytes.
    fn finish(self, m: &Materializer<'_>, tensor: &Tensor) -> Result<(), MaterializeError> {
        let hash = match self.keep {
            Keep::Blob(blob) => m.record(tensor, blob)?,
            Keep::InExports(hasher) => {
                // As for a blob: nothing computed from a moved input is kept.
                m.files.check_unchanged()?;
                Key(*hasher.finalize().as_bytes())
            }
            Keep::Nothing => return Ok(()),
        };
        m.destinations.mark_written(&tensor.key, &self.filled, hash);
        Ok(())
    }
}

impl Materializer<'_> {
    /// Encodes `tensor` into `out` at `offset` (and the other prepared
    /// exports that hold it, or a blob), or, when another node encodes it
    /// meanwhile, takes what that node put here, or copies what it put in
    /// another export or a blob.
    pub fn encode_at(&self, tensor: &Tensor, out: &File, offset: u64) -> Result<(), MaterializeError> {
        let place = Place::of(out, offset);
        let mut claim = match self.claim(tensor) {
            Claim::Encoded
                if self.placed_by_another(tensor, place)
                    || self.copy_placed(tensor, out, place)?
                    || self.copy_at(tensor, out, offset)? =>
            {
                return Ok(());
            }
            Claim::Mine(guard) => Some(guard),
            Claim::Encoded | Claim::Alone => None,
        };
        let holder = Holder::Exports { own: place };
        self.encode(tensor, &mut PositionedWriter { file: out, offset }, holder)?;
        if let Some(guard) = &mut claim {
            guard.done = true;
        }
        Ok(())
    }

    /// Computes a conversion slab by slab into `out` (and where `holder`
    /// says), with its unclaimed siblings.
    pub(super) fn encode(&self, tensor: &Tensor, out: &mut dyn Write, holder: Holder) -> Result<(), MaterializeError> {
        let siblings = self.claim_siblings(tensor);
        if !siblings.is_empty() {
            return self.encode_with_siblings(tensor, holder, siblings, out);
        }
        self.counters
            .decoded
            .fetch_add(u64::from(matches!(tensor.data, TensorData::Convert { .. })), Ordering::Relaxed);
        let io_err = |source| MaterializeError::Io { tensor: tensor.name.clone(), source };
        let mut copies = Copies::of(self, tensor, holder)?;
        self.pipelined(
            tensor,
            tensor,
            |first, rows| {
                let bytes = self.rows(tensor, first, rows)?;
                self.release(tensor, first, rows);
                Ok(bytes)
            },
            |bytes| {
                out.write_all(&bytes).map_err(io_err)?;
                self.written(bytes.len());
                copies.write(&bytes).map_err(io_err)
            },
        )?;
        // Credited to this node before others can find it stored.
        self.in_flight.credit(tensor.key);
        copies.finish(self, tensor)?;
        self.count_encoded(tensor);
        Ok(())
    }

    pub(super) fn written(&self, len: usize) {
        if let Some(on_written) = self.on_written {
            on_written(len as u64);
        }
    }

    /// The slabs `tensor` is computed in from `source`: (first row, rows),
    /// front to back.
    pub(super) fn slabs(&self, tensor: &Tensor, source: &Tensor) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (n_per_row, n_rows) = rows_of(tensor);
        let held_per_row = row_bytes(source) + 4 * n_per_row + row_bytes(tensor);
        let slab_rows = slab_rows(n_per_row, held_per_row, self.buffer_limit);
        (0..n_rows).step_by(slab_rows).map(move |first| (first, slab_rows.min(n_rows - first)))
    }

    /// Computes `tensor` slab by slab from `source`'s rows on the pool with
    /// `compute` (first row, rows), while this thread reads the input of the
    /// slab after ahead and hands the slab before to `write`: loading the
    /// next slab's input and writing a slab (and hashing it into a blob)
    /// overlap encoding, instead of stalling the pool or leaving it idle.
    pub(super) fn pipelined<T: Send>(
        &self,
        tensor: &Tensor,
        source: &Tensor,
        compute: impl Fn(usize, usize) -> Result<T, MaterializeError> + Sync,
        mut write: impl FnMut(T) -> Result<(), MaterializeError>,
    ) -> Result<(), MaterializeError> {
        let mut computed_before: Option<T> = None;
        for slab in self.slabs(tensor, source).map(Some).chain([None]) {
            let mut computed = None;
            self.pool.in_place_scope(|scope| {
                if let Some((first, rows)) = slab {
                    let (compute, computed) = (&compute, &mut computed);
                    scope.spawn(move |_| *computed = Some(compute(first, rows)));
                    self.read_ahead(source, first + rows, rows);
                }
                computed_before.take().map_or(Ok(()), &mut write)
            })?;
            computed_before = computed.transpose()?;
        }
        Ok(())
    }

    /// Commits a derived tensor's blob and records it under the tensor's
    /// key; returns the blob's hash.
    pub(super) fn record(&self, tensor: &Tensor, blob: Box<dyn BlobWriter>) -> Result<Key, MaterializeError> {
        let (hash, len) = blob.commit()?;
        // Bytes computed from an input that moved under the run are never
        // recorded under a key derived from its old content.
        self.files.check_unchanged()?;
        self.record_entry(tensor, hash, len)?;
        Ok(hash)
    }

    /// Records that blob `hash` (`len` bytes, in the store) holds `tensor`.
    pub fn record_entry(&self, tensor: &Tensor, hash: Key, len: u64) -> Result<(), MaterializeError> {
        let entry = TensorEntry { blob: hash, len, blobs: vec![hash] };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| MaterializeError::Io { tensor: tensor.name.clone(), source: e.into() })?;
        // An entry already there names these same bytes (a key names its
        // bytes by derivation): the first writer's stands.
        if self.store.put_action_if_absent(ActionKind::Tensor, &tensor.key, &json)? && self.store.keeps_results() {
            crate::exec::TENSORS_KEPT.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// [`Self::encode`] of `tensor` and the siblings claimed for it: each
    /// slab of their source read and decoded once, then encoded to every
    /// one's type, each into the prepared exports that hold it or its blob
    /// (and `tensor`'s into `out` too).
    pub(super) fn encode_with_siblings(
        &self,
        tensor: &Tensor,
        holder: Holder,
        siblings: Vec<(Tensor, ClaimGuard<'_>)>,
        out: &mut dyn Write,
    ) -> Result<(), MaterializeError> {
        let TensorData::Convert { from, producer, .. } = &tensor.data else {
            unreachable!("only conversions have siblings")
        };
        let (siblings, mut guards): (Vec<Tensor>, Vec<ClaimGuard<'_>>) = siblings.into_iter().unzip();
        let targets: Vec<&Tensor> = std::iter::once(tensor).chain(&siblings).collect();
        let mut copies = Vec::with_capacity(targets.len());
        let mut importances = Vec::with_capacity(targets.len());
        for (k, t) in targets.iter().enumerate() {
            let TensorData::Convert { importance, .. } = &t.data else { unreachable!("a sibling is a conversion") };
            importances.push(match importance {
                Some(hash) => Some(importance_from_blob(&self.store.read_blob(hash)?)),
                None => None,
            });
            let holder = if k == 0 { holder } else { Holder::Exports { own: None } };
            copies.push(Copies::of(self, t, holder)?);
        }
        self.pipelined(
            tensor,
            from,
            |first, rows| {
                let values = self.decoded_rows(from, producer.as_ref(), first, rows)?;
                self.release(from, first, rows);
                // The targets side by side on the pool, each spreading its rows too.
                self.pool.install(|| {
                    targets
                        .par_iter()
                        .zip(&importances)
                        .map(|(target, importance)| {
                            let TensorData::Convert { producer, .. } = &target.data else {
                                unreachable!("a conversion")
                            };
                            let values = bytemuck::cast_slice(&values);
                            self.convert_rows(
                                target,
                                GgmlType::F32,
                                producer.as_ref(),
                                values,
                                first,
                                importance.as_deref(),
                            )
                        })
                        .collect::<Result<Vec<Vec<u8>>, MaterializeError>>()
                })
            },
            |encoded| {
                for (k, ((target, copies), bytes)) in targets.iter().zip(&mut copies).zip(encoded).enumerate() {
                    let io_err = |source| MaterializeError::Io { tensor: target.name.clone(), source };
                    if k == 0 {
                        out.write_all(&bytes).map_err(io_err)?;
                        self.written(bytes.len());
                    }
                    copies.write(&bytes).map_err(io_err)?;
                }
                Ok(())
            },
        )?;
        // `tensor` is credited to this node before others can find it stored;
        // the siblings count for the nodes that copy them.
        self.in_flight.credit(tensor.key);
        for (target, copies) in targets.iter().zip(copies) {
            copies.finish(self, target)?;
        }
        for guard in &mut guards {
            guard.done = true;
        }
        // The siblings count for the nodes that copy them.
        self.count_encoded(tensor);
        self.counters.decoded.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
