//! The client of a remote cache URL ([`RemoteUrl`]): where its layout
//! lives and the `object_store` client that reaches it, with its timeouts
//! and retries.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::ClientConfigKey;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, RetryConfig};

use super::{CONNECT_TIMEOUT, REQUEST_TIMEOUT};
use crate::remote_url::{RemoteUrl, UrlError};

impl RemoteUrl {
    /// The path under which the layout lives.
    pub(super) fn root(&self) -> Result<ObjectPath, UrlError> {
        match self {
            RemoteUrl::S3 { prefix, .. } => ObjectPath::parse(prefix)
                .map_err(|e| UrlError::Invalid { shown: self.to_string(), problem: e.to_string() }),
            RemoteUrl::File { .. } => Ok(ObjectPath::default()),
        }
    }

    /// The client.
    pub(super) fn object_store(&self) -> Result<Arc<dyn ObjectStore>, UrlError> {
        match self {
            RemoteUrl::S3 { bucket, .. } => {
                let retry = RetryConfig {
                    backoff: BackoffConfig {
                        init_backoff: Duration::from_millis(100),
                        max_backoff: Duration::from_secs(2),
                        base: 2.0,
                    },
                    max_retries: 4,
                    retry_timeout: Duration::from_secs(20),
                };
                let store = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_retry(retry)
                    .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::Timeout), seconds(REQUEST_TIMEOUT))
                    .with_config(AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout), seconds(CONNECT_TIMEOUT))
                    .build()
                    .map_err(|e| UrlError::Client(e.to_string()))?;
                Ok(Arc::new(store))
            }
            RemoteUrl::File { dir } => {
                std::fs::create_dir_all(dir).map_err(|e| UrlError::Invalid {
                    shown: self.to_string(),
                    problem: format!("cannot create the directory: {e}"),
                })?;
                let store = LocalFileSystem::new_with_prefix(dir).map_err(|e| UrlError::Client(e.to_string()))?;
                Ok(Arc::new(store))
            }
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}
