//! A remote store shared by machines: result entries and the blobs they
//! name, on S3 (or any server speaking it) or in a directory on a shared
//! file system. It is only ever used behind a local cache ([`Layered`]).
//!
//! Layout (version 1) under the URL's prefix:
//!
//! ```text
//! quantforge-v1/LAYOUT                  marks the layout; written once
//! quantforge-v1/blobs/ab/abcd…          bytes whose blake3 is the name
//! quantforge-v1/actions/KIND/ab/abcd…   a sealed result entry (KIND: tensors,
//!                                       nodes, exports), as in a local cache
//! ```
//!
//! Blobs are content-addressed, so uploading one twice is harmless; an entry
//! is created only after every blob it names is complete on the remote, and
//! with a conditional create, so the first writer's entry stands. Nothing
//! read from the remote is trusted: entries are unsealed and blobs hashed
//! before use, exactly as local ones.

mod layered;
mod maintenance;
mod url;

use std::fs::File;
use std::future::Future;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};

pub use crate::remote_url::{RemoteUrl, UrlError};
pub use layered::{Layered, LayeredError, RemoteMode, TransferReport};
pub use maintenance::{RemoteGcReport, RemoteUsage, RemoteVerifyReport};

use super::{ActionKind, Key};

/// The layout this code reads and writes; a new one gets a new directory.
const LAYOUT: &str = "quantforge-v1";

/// Blobs up to this size move in one request; larger ones in parts of it,
/// several at once.
const PART: u64 = 8 << 20;

/// Parts or blobs in flight at once.
const CONCURRENCY: usize = 16;

/// Why a remote operation failed (after the client's retries).
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{location}: {}", ObjectErrorText(source))]
    Object { location: String, source: object_store::Error },
    #[error("{location}: {}", crate::files::IoText(source))]
    Local { location: String, source: std::io::Error },
    /// Bytes that do not hash to the blob's name (on the remote, or in the
    /// local file being uploaded).
    #[error("blob {hash}: {problem}")]
    Corrupt { hash: Key, problem: String },
    #[error("{location}: {problem}")]
    Client { location: String, problem: String },
}

pub type Result<T, E = RemoteError> = std::result::Result<T, E>;

/// One remote store.
pub struct Remote {
    url: RemoteUrl,
    root: ObjectPath,
    location: String,
    /// Made on first use: an S3 client reads the system's root
    /// certificates, which a run that never asks the remote should not pay.
    client: OnceLock<Result<Client, String>>,
}

/// What talks to the remote.
struct Client {
    objects: Arc<dyn ObjectStore>,
    runtime: tokio::runtime::Runtime,
    /// Ranges being downloaded, over all blobs: bounds the bytes in flight
    /// to `CONCURRENCY` parts.
    downloads: Arc<tokio::sync::Semaphore>,
}

impl Remote {
    /// The remote at `url`; nothing is made or sent until it is used.
    pub fn new(url: &RemoteUrl) -> Result<Remote, UrlError> {
        let root = url.root()?.join(LAYOUT);
        Ok(Remote { url: url.clone(), root, location: url.to_string(), client: OnceLock::new() })
    }

    fn client(&self) -> Result<&Client> {
        let client = self.client.get_or_init(|| {
            let objects = self.url.object_store().map_err(|e| e.to_string())?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("quantforge-remote")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the remote client: {e}"))?;
            let downloads = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
            Ok(Client { objects, runtime, downloads })
        });
        client
            .as_ref()
            .map_err(|problem| RemoteError::Client { location: self.location.clone(), problem: problem.clone() })
    }

    /// The URL, without anything secret (a URL never holds a secret).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Checks that the remote answers, and marks its layout on first use.
    pub fn probe(&self) -> Result<()> {
        let (objects, path) = (self.client()?.objects.clone(), self.root.clone().join("LAYOUT"));
        let text = format!("quantforge remote cache, layout {LAYOUT}\n");
        let result = self.client()?.wait(async move {
            match objects.head(&path).await {
                Ok(_) => Ok(()),
                Err(object_store::Error::NotFound { .. }) => {
                    let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
                    match objects.put_opts(&path, PutPayload::from(text.into_bytes()), options).await {
                        Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        });
        result.map_err(|e| self.object_error(e))
    }

    fn blob_path(&self, hash: &Key) -> ObjectPath {
        sharded(self.root.clone().join("blobs"), hash)
    }

    fn action_dir(&self, kind: ActionKind) -> ObjectPath {
        self.root.clone().join("actions").join(kind.name())
    }

    fn action_path(&self, kind: ActionKind, key: &Key) -> ObjectPath {
        sharded(self.action_dir(kind), key)
    }

    /// The blob's size, if the remote holds it (not yet checked).
    pub fn blob_size(&self, hash: &Key) -> Result<Option<u64>> {
        let (objects, path) = (self.client()?.objects.clone(), self.blob_path(hash));
        match self.client()?.wait(async move { objects.head(&path).await }) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.object_error(e)),
        }
    }

    /// Downloads a blob into `file` (from offset 0), hashing it as it comes;
    /// returns its length and the hash of what was written (the caller
    /// compares it with the name). The first part's answer tells the size:
    /// a blob of one part costs one request, a larger one fetches its other
    /// parts in parallel, hashed in order. `None` when the remote lacks it.
    pub fn download_blob(&self, hash: &Key, file: &File) -> Result<Option<(u64, Key)>> {
        if *hash == Key::of_bytes(&[]) {
            return Ok(Some((0, *hash)));
        }
        let file = Arc::new(file.try_clone().map_err(|e| self.local_error(e))?);
        let (objects, path, permits) =
            (self.client()?.objects.clone(), self.blob_path(hash), self.client()?.downloads.clone());
        let downloaded = self.client()?.wait(async move {
            let part = |range: std::ops::Range<u64>| {
                let (objects, path, file, permits) = (objects.clone(), path.clone(), file.clone(), permits.clone());
                async move {
                    // The semaphore is never closed.
                    let _permit = permits.acquire_owned().await.ok();
                    let options = GetOptions { range: Some(range.into()), ..GetOptions::default() };
                    let got = objects.get_opts(&path, options).await?;
                    let (start, size) = (got.range.start, got.meta.size);
                    let bytes = got.bytes().await?;
                    file.write_all_at(&bytes, start).map_err(Transfer::Local)?;
                    Ok::<_, Transfer>((bytes, size))
                }
            };
            let (first, size) = part(0..PART).await?;
            let (mut hasher, mut written) = (blake3::Hasher::new(), first.len() as u64);
            hasher.update(&first);
            let rest = (1..size.div_ceil(PART)).map(|i| i * PART..((i + 1) * PART).min(size));
            let mut rest = futures::stream::iter(rest).map(part).buffered(CONCURRENCY);
            while let Some((bytes, _)) = rest.try_next().await? {
                hasher.update(&bytes);
                written += bytes.len() as u64;
            }
            match written == size {
                true => Ok((size, Key(*hasher.finalize().as_bytes()))),
                false => Err(Transfer::Mismatch(format!("the remote sent {written} of its {size} bytes"))),
            }
        });
        match downloaded {
            Ok(done) => Ok(Some(done)),
            Err(Transfer::Object(object_store::Error::NotFound { .. })) => Ok(None),
            Err(e) => Err(self.transfer_error(hash, e)),
        }
    }

    /// Uploads a blob from `file` (`len` bytes from `base`), in parallel parts
    /// when it is large. The bytes are hashed as they are read: a file that
    /// does not hold the blob is never uploaded under its name.
    pub fn upload_blob(&self, hash: &Key, file: File, base: u64, len: u64) -> Result<()> {
        let (objects, path, expected) = (self.client()?.objects.clone(), self.blob_path(hash), *hash);
        let result = self.client()?.wait(async move {
            let mut hasher = blake3::Hasher::new();
            if len <= PART {
                let bytes = read_at(&file, base, len as usize).map_err(Transfer::Local)?;
                hasher.update(&bytes);
                if Key(*hasher.finalize().as_bytes()) != expected {
                    return Err(Transfer::Mismatch(NOT_UPLOADED.into()));
                }
                objects.put(&path, PutPayload::from(bytes)).await?;
                return Ok(());
            }
            let upload = objects.put_multipart(&path).await?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART as usize);
            let mut offset = 0;
            while offset < len {
                let chunk = read_at(&file, base + offset, PART.min(len - offset) as usize).map_err(Transfer::Local)?;
                hasher.update(&chunk);
                offset += chunk.len() as u64;
                writer.wait_for_capacity(CONCURRENCY).await?;
                writer.write(&chunk);
            }
            if Key(*hasher.finalize().as_bytes()) != expected {
                // Best effort: an unfinished upload is never visible.
                let _ = writer.abort().await;
                return Err(Transfer::Mismatch(NOT_UPLOADED.into()));
            }
            writer.finish().await?;
            Ok(())
        });
        result.map_err(|e| self.transfer_error(hash, e))
    }

    /// A sealed entry and when it was written, if the remote holds one.
    pub fn get_entry(&self, kind: ActionKind, key: &Key) -> Result<Option<(Vec<u8>, SystemTime)>> {
        let (objects, path) = (self.client()?.objects.clone(), self.action_path(kind, key));
        let result = self.client()?.wait(async move {
            let got = objects.get(&path).await?;
            let modified = got.meta.last_modified.into();
            Ok::<_, object_store::Error>((got.bytes().await?.to_vec(), modified))
        });
        match result {
            Ok(entry) => Ok(Some(entry)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.object_error(e)),
        }
    }

    /// Creates an entry unless one exists; true when this call created it.
    pub fn create_entry(&self, kind: ActionKind, key: &Key, sealed: Vec<u8>) -> Result<bool> {
        self.put_entry(kind, key, sealed, PutMode::Create)
    }

    /// Writes an entry over what is there (a repair, or a refresh of its age).
    pub fn replace_entry(&self, kind: ActionKind, key: &Key, sealed: Vec<u8>) -> Result<()> {
        self.put_entry(kind, key, sealed, PutMode::Overwrite).map(drop)
    }

    fn put_entry(&self, kind: ActionKind, key: &Key, sealed: Vec<u8>, mode: PutMode) -> Result<bool> {
        let (objects, path) = (self.client()?.objects.clone(), self.action_path(kind, key));
        let options = PutOptions { mode, ..PutOptions::default() };
        match self.client()?.wait(async move { objects.put_opts(&path, PutPayload::from(sealed), options).await }) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.object_error(e)),
        }
    }

    /// Every blob on the remote: hash, size, when it was written.
    pub fn list_blobs(&self) -> Result<Vec<Listed>> {
        self.list(self.root.clone().join("blobs"))
    }

    /// Every entry of `kind` on the remote.
    pub fn list_entries(&self, kind: ActionKind) -> Result<Vec<Listed>> {
        self.list(self.action_dir(kind))
    }

    fn list(&self, prefix: ObjectPath) -> Result<Vec<Listed>> {
        let objects = self.client()?.objects.clone();
        let metas = self.client()?.wait(async move { objects.list(Some(&prefix)).try_collect::<Vec<_>>().await });
        let metas = metas.map_err(|e| self.object_error(e))?;
        Ok(metas
            .into_iter()
            .filter_map(|meta| {
                let key = meta.location.filename().and_then(Key::from_hex)?;
                Some(Listed { key, size: meta.size, modified: meta.last_modified.into() })
            })
            .collect())
    }

    pub fn delete_blob(&self, hash: &Key) -> Result<()> {
        self.delete(self.blob_path(hash))
    }

    pub fn delete_entry(&self, kind: ActionKind, key: &Key) -> Result<()> {
        self.delete(self.action_path(kind, key))
    }

    fn delete(&self, path: ObjectPath) -> Result<()> {
        let objects = self.client()?.objects.clone();
        match self.client()?.wait(async move { objects.delete(&path).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.object_error(e)),
        }
    }

    fn object_error(&self, source: object_store::Error) -> RemoteError {
        RemoteError::Object { location: self.location.clone(), source }
    }

    fn local_error(&self, source: std::io::Error) -> RemoteError {
        RemoteError::Local { location: self.location.clone(), source }
    }

    fn transfer_error(&self, hash: &Key, failure: Transfer) -> RemoteError {
        match failure {
            Transfer::Object(e) => self.object_error(e),
            Transfer::Local(e) => self.local_error(e),
            Transfer::Mismatch(problem) => RemoteError::Corrupt { hash: *hash, problem },
        }
    }
}

impl Client {
    /// Runs `future` on the client's runtime and waits for it. Callable
    /// from any thread, including the engine's blocking tasks.
    fn wait<T, E>(&self, future: impl Future<Output = Result<T, E>> + Send + 'static) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<object_store::Error> + Send + 'static,
    {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            // The receiver waits until this sends; it cannot be gone.
            let _ = sender.send(future.await);
        });
        receiver.recv().unwrap_or_else(|_| {
            let source = "the remote task ended without an answer".into();
            Err(object_store::Error::Generic { store: "quantforge", source }.into())
        })
    }
}

/// An object-store error in words: credentials that are missing are said
/// so, with the variables that set them, not as the client's last attempt
/// to find some (the instance-metadata service's address).
struct ObjectErrorText<'a>(&'a object_store::Error);

impl std::fmt::Display for ObjectErrorText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0.to_string();
        if text.contains(INSTANCE_METADATA) {
            return f.write_str(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for \
                 temporary ones), or AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN; on EC2, give the instance a role",
            );
        }
        f.write_str(&text)
    }
}

/// Where the S3 client looks for credentials last, when no variable gives them.
const INSTANCE_METADATA: &str = "169.254.169.254";

/// One object in a listing.
#[derive(Debug, Clone, Copy)]
pub struct Listed {
    pub key: Key,
    pub size: u64,
    pub modified: SystemTime,
}

/// How a transfer failed, before it is told as a [`RemoteError`].
enum Transfer {
    Object(object_store::Error),
    Local(std::io::Error),
    /// Bytes that are not the blob's (what is wrong with them).
    Mismatch(String),
}

const NOT_UPLOADED: &str = "the local copy does not match its hash; not uploaded";

impl From<object_store::Error> for Transfer {
    fn from(e: object_store::Error) -> Transfer {
        Transfer::Object(e)
    }
}

/// The blobs a result entry names (every result entry lists them all).
fn named_blobs(content: &[u8]) -> Option<Vec<Key>> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        blobs: Vec<Key>,
    }
    serde_json::from_slice::<Envelope>(content).ok().map(|e| e.blobs)
}

fn sharded(dir: ObjectPath, key: &Key) -> ObjectPath {
    let hex = key.hex();
    dir.join(&hex[..2]).join(hex.as_str())
}

/// The `len` bytes of `file` at `offset`.
fn read_at(file: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0; len];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(bytes)
}

/// How long the client waits before it gives up on a request (each is
/// retried with backoff before an error reaches the caller).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
