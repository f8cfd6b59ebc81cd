//! Binding a recipe: each input hashed (through the stat table) and
//! shaped, each node keyed over its op, parameters and inputs' keys, the
//! external tools found and identified.

use super::*;

/// How an error about an input starts: where the recipe declares it
/// (`recipes/x.toml:4:8: input `m`: `); nothing for a one-shot command's
/// file, which the path after it names.
pub(super) fn input_label(recipe: &Recipe, decl: &crate::recipe::InputDecl) -> String {
    match (&recipe.source, decl.written_at) {
        (Some(file), Some((line, column))) => format!("{}:{line}:{column}: input `{}`: ", file.display(), decl.name),
        _ => String::new(),
    }
}

/// An input bound to its content: one file, or every shard of a split.
#[derive(Debug, Clone)]
pub(super) struct BoundInput {
    /// The file's blake3, or (a split) a key over every shard's.
    pub(super) key: Key,
    /// Content hashes of the files, in shard order.
    pub(super) shards: Vec<Key>,
    /// The index of a sharded SafeTensors checkpoint, when the input is one.
    pub(super) index: Option<CheckpointIndex>,
}

/// A recipe with its inputs hashed and its nodes keyed.
pub(super) struct Bound {
    pub(super) recipe: Recipe,
    pub(super) inputs: Vec<Option<BoundInput>>,
    pub(super) keys: Vec<Key>,
    pub(super) consumers: Vec<Vec<usize>>,
    pub(super) files: Arc<InputFiles>,
    /// The external tool each node runs, found and identified.
    pub(super) tools: Vec<Option<crate::tools::FoundTool>>,
    /// Where the run may write, checked when it was bound.
    pub(super) outputs: outputs::RunOutputs,
}

/// The external tool of each node that runs one, found and identified when
/// the run is planned: a missing tool fails the run before any work (its
/// identity is part of the node's key, cached result or not) — unless no
/// node of `wanted` needs it, so a run of other targets goes on without it.
pub(super) fn find_tools(
    recipe: &Recipe,
    store: &dyn Store,
    wanted: &[bool],
) -> Result<Vec<Option<crate::tools::FoundTool>>, RunError> {
    let hash = |path: &Path| fingerprint::content_hash(store, path).map(|c| c.hash);
    let mut found: HashMap<crate::tools::Tool, crate::tools::FoundTool> = HashMap::new();
    let mut tools = Vec::with_capacity(recipe.nodes.len());
    for (node, &wanted) in recipe.nodes.iter().zip(wanted) {
        let Some(tool) = node.op.tool() else {
            tools.push(None);
            continue;
        };
        let found = match found.entry(tool) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.get().clone()),
            std::collections::hash_map::Entry::Vacant(e) => {
                match crate::tools::find(tool, recipe.llama_cpp.as_deref(), &hash) {
                    Ok(tool) => Some(e.insert(tool).clone()),
                    Err(_) if !wanted => None,
                    Err(source) => return Err(RunError::Tool { node: node.step.clone(), source }),
                }
            }
        };
        tools.push(found);
    }
    Ok(tools)
}

/// The node whose importance matrix a `quantize` node uses (`imatrix =
/// "STEP"`): its second source.
pub(super) fn imatrix_step_of(node: &NodeDecl) -> Option<usize> {
    match (&node.op, node.from.get(1)) {
        (Op::Quantize(_), Some(&Source::Node(j))) => Some(j),
        _ => None,
    }
}

/// Every node's backend, resolved when the run is planned: one this machine
/// cannot provide fails the run before any work, whatever the cache holds.
pub(super) fn resolve_backends(bound: &Bound, store: &dyn Store) -> Result<Backends, RunError> {
    let fallback = crate::backend::resolve(crate::backend::Choice::Auto)
        .map_err(|source| RunError::Backend { node: "(default)".into(), source })?;
    let mut by_node = HashMap::new();
    for (node, key) in bound.recipe.nodes.iter().zip(&bound.keys) {
        let backend = crate::backend::resolve_with_store(node.backend, Some(store))
            .map_err(|source| RunError::Backend { node: node.step.clone(), source })?;
        by_node.insert(*key, backend);
    }
    Ok(Backends { by_node, fallback })
}

pub(super) fn input_hash(inputs: &[Option<BoundInput>], i: usize) -> Key {
    // bind() hashes every input a node names before keying nodes.
    inputs[i].as_ref().map_or(Key([0; 32]), |b| b.key)
}

/// The nodes `roots` need (every node when `None`): themselves and every
/// node upstream of them.
fn upstream_of(recipe: &Recipe, roots: Option<&[bool]>) -> Vec<bool> {
    let Some(roots) = roots else { return vec![true; recipe.nodes.len()] };
    let mut wanted = roots.to_vec();
    let mut stack: Vec<usize> = (0..wanted.len()).filter(|&i| wanted[i]).collect();
    while let Some(i) = stack.pop() {
        for source in &recipe.nodes[i].from {
            if let Source::Node(j) = *source
                && !wanted[j]
            {
                wanted[j] = true;
                stack.push(j);
            }
        }
    }
    wanted
}

impl Engine {
    /// Hashes the inputs (through the stat table) and keys every node.
    pub(super) fn bind(&self, recipe: &Recipe) -> Result<(Bound, Vec<InputReport>), RunError> {
        self.bind_for(recipe, None)
    }

    /// [`Engine::bind`] for a run of the nodes `roots` marks (all when
    /// `None`): a tool only the other nodes need may be missing.
    pub(super) fn bind_for(
        &self,
        recipe: &Recipe,
        roots: Option<&[bool]>,
    ) -> Result<(Bound, Vec<InputReport>), RunError> {
        let mut used = vec![false; recipe.inputs.len()];
        for node in &recipe.nodes {
            for src in &node.from {
                if let Source::Input(i) = src {
                    used[*i] = true;
                }
            }
            node.uses.iter().for_each(|&i| used[i] = true);
        }
        let mut inputs = Vec::with_capacity(recipe.inputs.len());
        let mut reports = Vec::new();
        let mut paths = Vec::new();
        for (idx, used) in used.into_iter().enumerate() {
            if !used {
                inputs.push(None);
                continue;
            }
            let (input, report) = self.bind_input(recipe, idx, &mut paths)?;
            reports.push(report);
            inputs.push(Some(input));
        }
        let tools = find_tools(recipe, &*self.store, &upstream_of(recipe, roots))?;
        let (keys, consumers) = node_keys(recipe, &inputs, &tools);
        let files = Arc::new(InputFiles::new(paths, self.open));
        let outputs = outputs::RunOutputs::check(recipe, self.store.directory(), files.paths())?;
        let bound = Bound { recipe: recipe.clone(), inputs, keys, consumers, files, tools, outputs };
        Ok((bound, reports))
    }

    /// Input `idx` of `recipe` hashed, each of its files pinned in `paths`.
    fn bind_input(
        &self,
        recipe: &Recipe,
        idx: usize,
        paths: &mut Vec<PinnedFile>,
    ) -> Result<(BoundInput, InputReport), RunError> {
        let decl = &recipe.inputs[idx];
        let label = input_label(recipe, decl);
        if let Some(fetch) = &decl.fetch
            && !decl.path.exists()
        {
            return Err(RunError::Missing { input: label, path: decl.path.clone(), fetch: fetch.clone() });
        }
        let input_err = |source| RunError::Input { input: label.clone(), path: decl.path.clone(), source };
        let (shape, files) = input_files(recipe, idx)
            .map_err(|source| RunError::Resolve { input: label.clone(), source: Box::new(source) })?;
        let (index, directory) = match shape {
            InputShape::CheckpointIndex(index) => (Some(index), false),
            InputShape::Directory(_) => (None, true),
            InputShape::File(_) | InputShape::Split(_) => (None, false),
        };
        let mut shards = Vec::with_capacity(files.len());
        let mut file_reports = Vec::with_capacity(files.len());
        let (mut bytes, mut rehashed) = (0, false);
        for (no, file) in files.iter().enumerate() {
            if !file.exists() && files.len() > 1 {
                let source = SplitError::MissingShard { path: file.clone(), shard: no + 1, count: files.len() };
                return Err(RunError::Split { input: label.clone(), source: Box::new(source) });
            }
            let content = match self.pins.get(file).and_then(|pin| pin.check(file)) {
                Some(pinned) => Ok(pinned),
                // A store that keeps nothing needs keys unique to this run only.
                None if self.store.keeps_results() || decl.pin.is_some() => match self.sha256_of_files {
                    true => fingerprint::content_hash_and_sha256(&*self.store, file),
                    false => fingerprint::content_hash(&*self.store, file),
                },
                None => fingerprint::stat_identity(file),
            };
            let content = content.map_err(input_err)?;
            if let Some(expected) = decl.pin
                && *file == decl.path
                && expected != content.hash
            {
                return Err(RunError::PinMismatch {
                    input: label.clone(),
                    path: decl.path.clone(),
                    expected,
                    actual: content.hash,
                });
            }
            paths.push(PinnedFile { path: file.clone(), content: content.hash, stat: content.stat });
            file_reports.push(InputFileReport {
                path: file.clone(),
                bytes: content.len,
                blake3: content.hash.hex(),
                load: None,
            });
            shards.push(content.hash);
            bytes += content.len;
            rehashed |= content.rehashed;
        }
        let key = match (&index, shards.as_slice()) {
            (None, _) if directory => {
                // Each file by its path below the directory (`1_Pooling/config.json`).
                let dir = crate::formats::hub_snapshot(&decl.path);
                let mut key = KeyBuilder::new("input.directory");
                for (file, hash) in files.iter().zip(&shards) {
                    key.str(&file.strip_prefix(&dir).unwrap_or(file).to_string_lossy()).key(hash);
                }
                key.finish()
            }
            (None, [single]) => *single,
            (None, _) => {
                let mut key = KeyBuilder::new("input.split");
                shards.iter().for_each(|h| {
                    key.key(h);
                });
                key.finish()
            }
            (Some(_), _) => {
                // The index's weight map is checked against the shards.
                let index = fingerprint::content_hash(&*self.store, &decl.path).map_err(input_err)?;
                let index_hash = index.hash;
                file_reports.insert(
                    0,
                    InputFileReport { path: decl.path.clone(), bytes: index.len, blake3: index_hash.hex(), load: None },
                );
                let mut key = KeyBuilder::new("input.safetensors-index");
                key.key(&index_hash);
                shards.iter().for_each(|h| {
                    key.key(h);
                });
                key.finish()
            }
        };
        let report = InputReport {
            name: decl.name.clone(),
            path: decl.path.clone(),
            content_key: key.hex(),
            bytes,
            rehashed,
            files: file_reports,
        };
        Ok((BoundInput { key, shards, index }, report))
    }
}

/// What input `idx` of `recipe` names, and the files of it the run reads.
fn input_files(recipe: &Recipe, idx: usize) -> Result<(InputShape, Vec<PathBuf>), crate::formats::FormatError> {
    let path = &recipe.inputs[idx].path;
    // Checkpoint directories: what `convert` reads, and both inputs of `convert-lora`.
    let converted = recipe.nodes.iter().any(|n| match n.op {
        Op::Convert(_) => n.from.contains(&Source::Input(idx)),
        Op::ConvertLora(_) => n.from.contains(&Source::Input(idx)) || n.uses.contains(&idx),
        _ => false,
    });
    let shape = match converted && path.is_dir() {
        true => crate::convert::files_read(&crate::formats::hub_snapshot(path)).map(InputShape::Directory),
        false => InputShape::resolve(path),
    }?;
    // A `convert-lora` base is read for its config.json alone: the
    // weights beside it are neither hashed nor pinned.
    let only_config = !recipe.nodes.iter().any(|n| n.from.contains(&Source::Input(idx)))
        && recipe.nodes.iter().any(|n| matches!(n.op, Op::ConvertLora(_)) && n.uses.contains(&idx));
    let mut files = shape.files();
    if only_config {
        files.retain(|file| file.file_name() == Some("config.json".as_ref()));
    }
    Ok((shape, files))
}

/// Each node's key, over its op and version, the codec version, its
/// parameters, its sources' keys, the inputs it uses (with the path as the
/// recipe writes it: llama-quantize records an imatrix file's name), the
/// name an imatrix step's result is recorded under and the tool it runs;
/// and each node's consumers.
fn node_keys(
    recipe: &Recipe,
    inputs: &[Option<BoundInput>],
    tools: &[Option<crate::tools::FoundTool>],
) -> (Vec<Key>, Vec<Vec<usize>>) {
    let mut keys: Vec<Key> = Vec::with_capacity(recipe.nodes.len());
    let mut consumers = vec![Vec::new(); recipe.nodes.len()];
    for (i, node) in recipe.nodes.iter().enumerate() {
        let mut key = KeyBuilder::new("node");
        key.str(node.op.name()).u64(u64::from(node.op.spec().version)).u64(u64::from(CODEC_VERSION));
        key.str(&node.op.key_params().to_string());
        for src in &node.from {
            match *src {
                Source::Input(j) => key.key(&input_hash(inputs, j)),
                Source::Node(j) => {
                    consumers[j].push(i);
                    key.key(&keys[j])
                }
            };
        }
        for &j in &node.uses {
            key.key(&input_hash(inputs, j));
            key.str(&recipe.inputs[j].as_written.to_string_lossy());
        }
        if let Some(j) = imatrix_step_of(node) {
            key.str(&recipe.imatrix_name(j).to_string_lossy());
        }
        if let Some(tool) = &tools[i] {
            key.str("tool").key(&tool.identity);
        }
        keys.push(key.finish());
    }
    (keys, consumers)
}
