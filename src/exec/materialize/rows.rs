//! Rows of a tensor in its type, from wherever its bytes come: an input,
//! a blob, a checkpoint's transforms, a stack, a slice, a merge or a
//! conversion, one slab at a time.

use super::*;

/// A step's tensor set as the budget planner reads it: the sampled rows
/// computed as an export would compute them (conversions included), decoded.
pub struct SetRows<'a> {
    pub materializer: &'a Materializer<'a>,
    pub set: &'a TensorSet,
}

impl RowSource for SetRows<'_> {
    fn rows(&self, index: usize, rows: &[usize], backend: &dyn Backend, out: &mut [f32]) -> Result<(), BudgetError> {
        let tensor = &self.set.tensors[index];
        let (n_per_row, _) = rows_of(tensor);
        for (&r, out) in rows.iter().zip(out.chunks_exact_mut(n_per_row)) {
            let encoded = self
                .materializer
                .rows(tensor, r, 1)
                .map_err(|e| BudgetError::Rows { tensor: tensor.name.clone(), source: Box::new(e) })?;
            let slab = Slab {
                from: tensor.ggml_type,
                to: tensor.ggml_type,
                n_per_row,
                first_row: r,
                rows_per_expert: 1,
                source: &encoded,
                importance: None,
                row_numbers: None,
            };
            backend.decode(&slab, out).map_err(|source| BudgetError::Codec { tensor: tensor.name.clone(), source })?;
            self.materializer.release(tensor, r, 1);
        }
        Ok(())
    }
}

/// (elements per row, rows).
/// The parts of a stacked tensor that rows `first..first + n` fall in:
/// each part with its first row and the number of its rows taken.
pub(super) fn part_rows(parts: &[Tensor], first: usize, n: usize) -> impl Iterator<Item = (&Tensor, usize, usize)> {
    let mut start = 0;
    parts.iter().filter_map(move |part| {
        let rows = rows_of(part).1;
        let (part_start, part_end) = (start, start + rows);
        start = part_end;
        let (from, to) = (first.max(part_start), (first + n).min(part_end));
        (from < to).then(|| (part, from - part_start, to - from))
    })
}

pub(super) fn rows_of(tensor: &Tensor) -> (usize, usize) {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1) as usize;
    let n_elements = tensor.info().n_elements() as usize;
    (n_per_row, n_elements.checked_div(n_per_row).unwrap_or(0))
}

/// Rows per slab: [`SLAB_ELEMENTS`] values, or fewer under a buffer limit.
/// Three slabs are alive at once (one read ahead, one computed, one
/// written), each holding `held_per_row` bytes a row (as read, as f32 and
/// as encoded), so a slab takes a third of the limit; never less than a row.
pub(super) fn slab_rows(n_per_row: usize, held_per_row: usize, buffer_limit: Option<u64>) -> usize {
    let rows = (SLAB_ELEMENTS / n_per_row.max(1)).max(1);
    match buffer_limit {
        Some(limit) => rows.min((limit / 3 / held_per_row.max(1) as u64).max(1) as usize),
        None => rows,
    }
}

pub(super) fn row_bytes(tensor: &Tensor) -> usize {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1);
    tensor.ggml_type.row_size(n_per_row).unwrap_or(0) as usize
}

impl Materializer<'_> {
    /// Rows `first..first + n` of a stacked tensor: each part's rows in turn.
    pub(super) fn stacked_rows(
        &self,
        tensor: &Tensor,
        parts: &[Tensor],
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        let mut out = Vec::with_capacity(n * row_bytes(tensor));
        // A 1-D tensor is one row: its parts' elements one after another.
        if tensor.dims.len() < 2 {
            for part in parts {
                out.extend_from_slice(&self.rows(part, 0, 1)?);
            }
            return Ok(out);
        }
        for (part, from, rows) in part_rows(parts, first, n) {
            out.extend_from_slice(&self.rows(part, from, rows)?);
        }
        Ok(out)
    }

    /// Writes a slice cut from `from`'s bytes a slab at a time. A
    /// conversion is computed whole and stored first (when the store keeps
    /// results), so the devices' slices of it cost one encode between them
    /// and a rerun cuts them from the cache.
    pub(super) fn write_slice(
        &self,
        tensor: &Tensor,
        from: &Tensor,
        out: &mut dyn Write,
    ) -> Result<(), MaterializeError> {
        if self.store.keeps_results() && from.is_derived() && self.cached(from).is_none() {
            match self.claim(from) {
                Claim::Encoded => {}
                Claim::Mine(mut guard) => {
                    self.encode(from, &mut io::sink(), Holder::Blob)?;
                    guard.done = true;
                }
                Claim::Alone => self.encode(from, &mut io::sink(), Holder::Blob)?,
            }
        }
        for (first, rows) in self.slabs(tensor, from) {
            let bytes = self.rows(tensor, first, rows)?;
            out.write_all(&bytes).map_err(|source| MaterializeError::Io { tensor: tensor.name.clone(), source })?;
        }
        self.counters.copied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Rows `first..first + n` of a slice of `from`: parts of each of
    /// `from`'s rows for a cut along axis 0, runs of its rows for another.
    pub(super) fn slice_rows(
        &self,
        tensor: &Tensor,
        from: &Tensor,
        cut: &AxisCut,
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        let whole = from.info();
        let misfit = || MaterializeError::Io {
            tensor: tensor.name.clone(),
            source: io::Error::other(format!("its slice {cut:?} does not fit its dimensions {:?}", whole.dims)),
        };
        if cut.axis == 0 {
            let rows = TensorInfo::new(whole.name.clone(), vec![whole.dims[0], n as u64], whole.ggml_type);
            let source = self.rows(from, first, n)?;
            self.release(from, first, n);
            return cut.cut(&rows, &source).ok_or_else(misfit);
        }
        let mut bytes = Vec::with_capacity(n * row_bytes(tensor));
        let (wanted, end) = (first as u64, (first + n) as u64);
        let mut run_start = 0;
        for (from_first, count) in cut.row_runs(&whole).ok_or_else(misfit)? {
            let run_end = run_start + count;
            let (lo, hi) = (wanted.max(run_start), end.min(run_end));
            if lo < hi {
                let (row, rows) = ((from_first + lo - run_start) as usize, (hi - lo) as usize);
                bytes.extend_from_slice(&self.rows(from, row, rows)?);
                self.release(from, row, rows);
            }
            if run_end >= end {
                break;
            }
            run_start = run_end;
        }
        Ok(bytes)
    }

    /// Rows `first..first + n` of `tensor` decoded to f32 on `producer`'s backend.
    pub(super) fn decoded_rows(
        &self,
        tensor: &Tensor,
        producer: Option<&Key>,
        first: usize,
        n: usize,
    ) -> Result<Vec<f32>, MaterializeError> {
        let (n_per_row, _) = rows_of(tensor);
        // An input's rows are decoded where they are mapped, not copied first.
        let model;
        let source = match &tensor.data {
            TensorData::Input { file, index } => {
                model = self.files.model(file)?;
                self.input_rows(&model, *index, tensor, first, n)?
            }
            _ => self.rows(tensor, first, n)?.into(),
        };
        let slab = Slab {
            from: tensor.ggml_type,
            to: GgmlType::F32,
            n_per_row,
            first_row: first,
            rows_per_expert: 1,
            source: &source,
            importance: None,
            row_numbers: None,
        };
        let mut values = vec![0f32; n * n_per_row];
        let backend = self.backends.of(producer);
        self.pool
            .install(|| backend.decode(&slab, &mut values))
            .map_err(|source| MaterializeError::Codec { tensor: tensor.name.clone(), source })?;
        Ok(values)
    }

    /// All of a small tensor's bytes, in its type, at once (an importance
    /// matrix's sums and counts).
    pub fn whole(&self, tensor: &Tensor) -> Result<Vec<u8>, MaterializeError> {
        self.rows(tensor, 0, rows_of(tensor).1)
    }

    /// Rows `first..first + n` of `tensor`, in its type.
    pub(super) fn rows(&self, tensor: &Tensor, first: usize, n: usize) -> Result<Vec<u8>, MaterializeError> {
        let row_bytes = row_bytes(tensor);
        let (offset, len) = ((first * row_bytes) as u64, (n * row_bytes) as u64);
        match &tensor.data {
            TensorData::Input { file, index } => {
                let model = self.files.model(file)?;
                Ok(self.input_rows(&model, *index, tensor, first, n)?.into_owned())
            }
            TensorData::Blob { hash } => Ok(self.store.read_blob_range(hash, offset, len)?),
            TensorData::Checkpoint { file, index, transform, scale } => {
                let model = self.files.model(file)?;
                // A checkpoint tensor names no node: the run's default backend decodes it.
                let backend = &*self.backends.fallback;
                let source = checkpoint_tensor(tensor, &model, *index)?;
                let checkpoint_error =
                    |e| MaterializeError::Checkpoint { tensor: tensor.name.clone(), source: Box::new(e) };
                let scale = match scale {
                    Some(scale) => {
                        let scales = self.files.model(&scale.file)?;
                        let read = WeightScale::read(source, &scales, scale.index, scale.block, backend);
                        Some(read.map_err(checkpoint_error)?)
                    }
                    None => None,
                };
                let (n_per_row, _) = rows_of(tensor);
                let mut values = vec![0f32; n * n_per_row];
                crate::convert::checkpoint_rows(&model, source, transform, scale.as_ref(), first, backend, &mut values)
                    .map_err(checkpoint_error)?;
                // f32 rows in the host order: little-endian, as the codecs assume.
                Ok(bytemuck::cast_slice(&values).to_vec())
            }
            TensorData::Convert { from, importance, producer } => {
                if let Some(hash) = self.cached(tensor) {
                    match self.store.read_blob_range(&hash, offset, len) {
                        Ok(bytes) => return Ok(bytes),
                        // Quarantined: computed below instead.
                        Err(e) if e.is_recoverable() => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let weights = match importance {
                    Some(hash) => Some(importance_from_blob(&self.store.read_blob(hash)?)),
                    None => None,
                };
                // Straight from an input: convert from the mapped bytes, no copy.
                if let TensorData::Input { file, index } = &from.data {
                    let model = self.files.model(file)?;
                    let source = self.input_rows(&model, *index, from, first, n)?;
                    return self.convert_rows(
                        tensor,
                        from.ggml_type,
                        producer.as_ref(),
                        &source,
                        first,
                        weights.as_deref(),
                    );
                }
                // Reordered at most: converted from the stored bytes, not
                // through an f32 copy of them; kept as they are when stored
                // in the tensor's type and finite (what came back unchanged
                // through f32; the conversion refuses the others).
                if let TensorData::Checkpoint { file, index, transform, scale: None } = &from.data {
                    let model = self.files.model(file)?;
                    let checkpoint_error =
                        |e| MaterializeError::Checkpoint { tensor: tensor.name.clone(), source: Box::new(e) };
                    if let Some(source) = model.tensors.get(*index)
                        && let Some(stored) =
                            crate::convert::checkpoint_rows_as_stored(&model, source, transform, first, n)
                                .map_err(checkpoint_error)?
                    {
                        if source.ggml_type == tensor.ggml_type
                            && crate::codecs::all_finite(tensor.ggml_type, &stored) == Some(true)
                        {
                            return Ok(stored.into_owned());
                        }
                        let producer = producer.as_ref();
                        return self.convert_rows(
                            tensor,
                            source.ggml_type,
                            producer,
                            &stored,
                            first,
                            weights.as_deref(),
                        );
                    }
                }
                let source = self.rows(from, first, n)?;
                self.convert_rows(tensor, from.ggml_type, producer.as_ref(), &source, first, weights.as_deref())
            }
            TensorData::Mxfp4 { blocks, scales, rows } => {
                let (codes, exponents) = (self.files.model(&blocks.file)?, self.files.model(&scales.file)?);
                let codes = (&*codes, checkpoint_tensor(tensor, &codes, blocks.index)?);
                let exponents = (&*exponents, checkpoint_tensor(tensor, &exponents, scales.index)?);
                crate::convert::mxfp4::repacked_rows(codes, exponents, *rows, first, n)
                    .map_err(|e| MaterializeError::Checkpoint { tensor: tensor.name.clone(), source: Box::new(e) })
            }
            TensorData::Slice { from, cut } => self.slice_rows(tensor, from, cut, first, n),
            TensorData::Stacked { parts } => self.stacked_rows(tensor, parts, first, n),
            TensorData::Merged { base, deltas } => self.merged_rows(tensor, base, deltas, first, n),
        }
    }

    /// Rows `first..first + n` of a merged tensor: the base's rows in f32,
    /// each delta added, encoded to the tensor's type.
    pub(super) fn merged_rows(
        &self,
        tensor: &Tensor,
        base: &Tensor,
        deltas: &[LoraDelta],
        first: usize,
        n: usize,
    ) -> Result<Vec<u8>, MaterializeError> {
        use crate::ops::lora_merge::{add_delta, add_embedding_delta};
        let (n_per_row, _) = rows_of(tensor);
        let mut values = self.decoded_rows(base, None, first, n)?;
        for delta in deltas {
            let (rank, b_rows) = rows_of(&delta.b);
            if delta.token_embedding {
                let a_rows = self.decoded_rows(&delta.a, None, first, n)?;
                let b = self.decoded_rows(&delta.b, None, 0, b_rows)?;
                self.pool.install(|| add_embedding_delta(&mut values, &a_rows, &b, rank, delta.scale()));
                continue;
            }
            // Rows of a stack of experts: each expert's run with its own A.
            let per_expert = delta.b.dims[1] as usize;
            let mut row = first;
            while row < first + n {
                let expert = row / per_expert;
                let end = ((expert + 1) * per_expert).min(first + n);
                let a = self.decoded_rows(&delta.a, None, expert * rank, rank)?;
                let b = self.decoded_rows(&delta.b, None, row, end - row)?;
                let rows = &mut values[(row - first) * n_per_row..(end - first) * n_per_row];
                self.pool.install(|| add_delta(rows, &a, &b, rank, delta.scale()));
                row = end;
            }
        }
        let mut encoded = vec![0u8; n * row_bytes(tensor)];
        self.pool
            .install(|| {
                encoded
                    .par_chunks_mut(row_bytes(tensor).max(1))
                    .zip(values.par_chunks(n_per_row.max(1)))
                    .try_for_each(|(out, row)| crate::codecs::quantize_row(tensor.ggml_type, row, None, out))
            })
            .map_err(|source| MaterializeError::Codec { tensor: tensor.name.clone(), source })?;
        Ok(encoded)
    }

    /// Converts whole rows of type `from` (starting at row `first`) to
    /// `tensor`'s type on the backend of the node that made the conversion.
    pub(super) fn convert_rows(
        &self,
        tensor: &Tensor,
        from: GgmlType,
        producer: Option<&Key>,
        source: &[u8],
        first: usize,
        importance: Option<&[f32]>,
    ) -> Result<Vec<u8>, MaterializeError> {
        let (n_per_row, _) = rows_of(tensor);
        let slab = Slab {
            from,
            to: tensor.ggml_type,
            n_per_row,
            first_row: first,
            rows_per_expert: tensor.dims.get(1).copied().unwrap_or(1).max(1) as usize,
            source,
            importance,
            row_numbers: None,
        };
        let mut encoded = vec![0u8; slab.rows() * row_bytes(tensor)];
        let backend = self.backends.of(producer);
        self.pool.install(|| backend.convert(&slab, &mut encoded)).map_err(|e| match e {
            SlabError::Codec(source) => MaterializeError::Codec { tensor: tensor.name.clone(), source },
            SlabError::NonFinite { row, value } => {
                MaterializeError::NonFinite { tensor: tensor.name.clone(), row, value }
            }
        })?;
        self.counters.backends.lock().unwrap_or_else(|e| e.into_inner()).insert(backend.ran_on(&slab, true));
        Ok(encoded)
    }

    /// Lets the kernel drop input pages a slab has consumed.
    pub(super) fn release(&self, tensor: &Tensor, first: usize, n: usize) {
        self.with_input_rows(tensor, first, n, &|model, info, offset, len| {
            model.release_tensor_range(info, offset, len)
        });
    }

    /// Reads the input of a slab to come ahead (see [`ModelFile::read_ahead_tensor_range`]).
    pub(super) fn read_ahead(&self, tensor: &Tensor, first: usize, n: usize) {
        self.with_input_rows(tensor, first, n, &|model, info, offset, len| {
            model.read_ahead_tensor_range(info, offset, len)
        });
    }

    /// Calls `with` on the input file, tensor and byte range that rows
    /// `first..first + n` of `tensor` are computed from, when one input
    /// tensor's rows are (or each part's, of a stacked tensor).
    pub(super) fn with_input_rows(
        &self,
        tensor: &Tensor,
        first: usize,
        n: usize,
        with: &dyn Fn(&ModelFile, &TensorInfo, u64, u64),
    ) {
        match &tensor.data {
            TensorData::Convert { from, .. } => self.with_input_rows(from, first, n, with),
            TensorData::Input { file, index } => {
                if let Ok(model) = self.files.model(file)
                    && let Some(info) = model.tensors.get(*index)
                {
                    let row = row_bytes(tensor) as u64;
                    with(&model, info, first as u64 * row, n as u64 * row);
                }
            }
            // A range of a fused tensor reads rows spread over it: no one range to name.
            TensorData::Checkpoint { transform, .. } if transform.rows.is_some() => {}
            TensorData::Checkpoint { file, index, .. } => {
                if let Ok(model) = self.files.model(file)
                    && let Some(info) = model.tensors.get(*index)
                {
                    let row = info.ggml_type.row_size(info.dims[0]).unwrap_or(0);
                    with(&model, info, first as u64 * row, n as u64 * row);
                }
            }
            TensorData::Stacked { parts } if tensor.dims.len() < 2 => {
                parts.iter().for_each(|part| self.with_input_rows(part, 0, 1, with));
            }
            TensorData::Stacked { parts } => {
                for (part, from, n) in part_rows(parts, first, n) {
                    self.with_input_rows(part, from, n, with);
                }
            }
            // All of each A is read for every slab: only the rows of the base and of each B are the slab's.
            TensorData::Merged { base, deltas } => {
                self.with_input_rows(base, first, n, with);
                deltas.iter().for_each(|delta| self.with_input_rows(&delta.b, first, n, with));
            }
            // Gate or up reads every other row of the codes: the span they lie in.
            TensorData::Mxfp4 { blocks, scales, rows } => {
                let Some(span) = crate::convert::mxfp4::source_rows(*rows, first, n) else { return };
                let selected: u64 = tensor.dims.iter().skip(1).product();
                let source_rows =
                    rows.map_or(selected, |range| selected / range.len.max(1) as u64 * range.group as u64);
                for at in [blocks, scales] {
                    if let Ok(model) = self.files.model(&at.file)
                        && let Some(info) = model.tensors.get(at.index)
                    {
                        let row = info.n_bytes() / source_rows.max(1);
                        with(&model, info, span.start as u64 * row, span.len() as u64 * row);
                    }
                }
            }
            // A slice's rows are its source's, released as they are cut; a blob is the store's.
            TensorData::Blob { .. } | TensorData::Slice { .. } => {}
        }
    }
}

/// Tensor `index` of checkpoint file `model`, which `tensor` is computed from.
fn checkpoint_tensor<'m>(
    tensor: &Tensor,
    model: &'m ModelFile,
    index: usize,
) -> Result<&'m TensorInfo, MaterializeError> {
    model.tensors.get(index).ok_or_else(|| MaterializeError::Io {
        tensor: tensor.name.clone(),
        source: io::Error::other(format!("{} has no tensor {index}", model.path().display())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_limit_shrinks_slabs_to_a_third_of_it_and_never_below_a_row() {
        // Gemma's token embeddings, F16 to Q4_K: 640 values a row.
        let held = 2 * 640 + 4 * 640 + 360;
        assert_eq!(slab_rows(640, held, None), SLAB_ELEMENTS / 640);
        assert_eq!(slab_rows(640, held, Some(1 << 20)), (1 << 20) / 3 / held);
        assert_eq!(slab_rows(640, held, Some(1 << 40)), SLAB_ELEMENTS / 640);
        assert_eq!(slab_rows(1 << 22, 7 << 22, Some(1 << 20)), 1);
    }
}
