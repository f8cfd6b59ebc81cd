//! Remote cache URLs: `s3://BUCKET/PREFIX` (configured by the standard AWS
//! variables) and `file:///DIR` (a shared file system), as a recipe or the
//! command line names them. A URL never carries a secret: one with
//! credentials in it is refused, and nothing here ever prints more of a URL
//! than its scheme, bucket or directory and prefix. A leaf: the recipe
//! reads one without the store; the store's client for it is
//! `store::remote`'s.

use std::fmt;
use std::path::PathBuf;

/// Where a remote cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    S3 { bucket: String, prefix: String },
    File { dir: PathBuf },
}

#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error(
        "the cache URL holds credentials; remove them and set AWS_ACCESS_KEY_ID and \
         AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones) instead"
    )]
    Credentials,
    #[error("the cache URL does not parse ({0}); expected s3://BUCKET/PREFIX or file:///DIR")]
    Unparsable(String),
    #[error("cache URL `{shown}`: {problem}")]
    Invalid { shown: String, problem: String },
    #[error("cannot set up the remote cache client: {0}")]
    Client(String),
}

impl RemoteUrl {
    pub fn parse(text: &str) -> Result<RemoteUrl, UrlError> {
        // The text itself is never repeated: it may hold a secret.
        let url = ::url::Url::parse(text).map_err(|e| UrlError::Unparsable(e.to_string()))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(UrlError::Credentials);
        }
        let invalid = |problem: &str| UrlError::Invalid {
            shown: format!("{}://{}{}", url.scheme(), url.host_str().unwrap_or(""), url.path()),
            problem: problem.to_owned(),
        };
        if url.query().is_some() || url.fragment().is_some() {
            // A presigned URL's query holds a signature: say nothing of it.
            return Err(invalid("a query or fragment is not supported; configure the client with AWS_* variables"));
        }
        match url.scheme() {
            "s3" => {
                let bucket = url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| invalid("no bucket"))?;
                let prefix = url.path().trim_matches('/').to_owned();
                Ok(RemoteUrl::S3 { bucket: bucket.to_owned(), prefix })
            }
            "file" => {
                if url.host_str().is_some_and(|h| !h.is_empty()) {
                    return Err(invalid("a file URL names a local directory: file:///DIR"));
                }
                let dir = url.to_file_path().map_err(|()| invalid("not a directory path"))?;
                Ok(RemoteUrl::File { dir })
            }
            _ => Err(invalid("unknown scheme (expected s3:// or file://)")),
        }
    }
}

impl fmt::Display for RemoteUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            RemoteUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            RemoteUrl::File { dir } => write!(f, "file://{}", dir.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_s3_and_file_urls() {
        let s3 = RemoteUrl::parse("s3://models/ci/cache").unwrap();
        assert_eq!(s3, RemoteUrl::S3 { bucket: "models".into(), prefix: "ci/cache".into() });
        assert_eq!(s3.to_string(), "s3://models/ci/cache");
        assert_eq!(RemoteUrl::parse("s3://models").unwrap().to_string(), "s3://models");
        let file = RemoteUrl::parse("file:///mnt/shared/qf").unwrap();
        assert_eq!(file, RemoteUrl::File { dir: "/mnt/shared/qf".into() });
    }

    #[test]
    fn refuses_credentials_without_repeating_them() {
        for url in ["s3://AKIAEXAMPLE:s3cr3t@bucket/p", "s3://AKIAEXAMPLE@bucket", "s3://:s3cr3t@bucket"] {
            let message = RemoteUrl::parse(url).unwrap_err().to_string();
            assert!(message.contains("AWS_ACCESS_KEY_ID"), "{message}");
            assert!(!message.contains("s3cr3t") && !message.contains("AKIAEXAMPLE"), "{message}");
        }
        let message = RemoteUrl::parse("s3://bucket/p?X-Amz-Signature=s3cr3t").unwrap_err().to_string();
        assert!(!message.contains("s3cr3t"), "{message}");
        let message = RemoteUrl::parse("not a url s3cr3t@x").unwrap_err().to_string();
        assert!(!message.contains("s3cr3t"), "{message}");
    }

    #[test]
    fn refuses_other_schemes_and_hosts_in_file_urls() {
        assert!(RemoteUrl::parse("http://bucket/x").is_err());
        assert!(RemoteUrl::parse("file://server/share").is_err());
        assert!(RemoteUrl::parse("s3:///nobucket").is_err());
    }
}
