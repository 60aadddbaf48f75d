//! Every model in a folder, for a server that serves them all: GGUF files
//! (each with the projector beside it, when there is one) and Hugging Face
//! checkpoint folders, named the way a user would ask for them.

use crate::Registry;
use std::path::{Path, PathBuf};

/// How deep a scan descends: the Hub cache's own layout
/// (`hf/models--OWNER--REPO/snapshots/COMMIT/FILE`) is four folders down.
const MAX_DEPTH: usize = 6;

/// One model found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The names it answers to; the first is its id. A pulled alias comes
    /// first (`gemma3-270m`), then the path below the scanned folder without
    /// `.gguf`, or `hf:OWNER/REPO/FILE` for a file in the Hub cache.
    pub names: Vec<String>,
    /// The GGUF file or the checkpoint folder.
    pub path: PathBuf,
    /// The projector (`mmproj*.gguf`) in the same folder as a GGUF model.
    pub mmproj: Option<PathBuf>,
}

/// The models under `dir`, sorted by id. A folder holding `config.json` and
/// safetensors is one checkpoint and is not searched further; hidden
/// entries, partial downloads and projectors are not models. A folder that
/// cannot be read is skipped (a scan lists what it can).
pub fn scan(dir: &Path, registry: &Registry) -> std::io::Result<Vec<Found>> {
    std::fs::read_dir(dir)?;
    let mut found = Vec::new();
    walk(dir, dir, 0, registry, &mut found);
    found.sort_by(|a, b| a.names[0].cmp(&b.names[0]));
    Ok(found)
}

/// A checkpoint folder: its config and at least one safetensors file.
pub fn is_checkpoint(dir: &Path) -> bool {
    dir.join("config.json").is_file()
        && std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
        })
}

fn walk(root: &Path, dir: &Path, depth: usize, registry: &Registry, found: &mut Vec<Found>) {
    if is_checkpoint(dir) && dir != root {
        found.push(Found {
            names: vec![relative_name(root, dir)],
            path: dir.to_path_buf(),
            mmproj: None,
        });
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files = Vec::new();
    let mut projectors = Vec::new();
    let mut folders = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            folders.push(path);
        } else if name.to_ascii_lowercase().ends_with(".gguf") && path.is_file() {
            if name.to_ascii_lowercase().starts_with("mmproj") {
                projectors.push(path);
            } else {
                files.push(path);
            }
        }
    }
    projectors.sort();
    for file in files {
        let mmproj = projector_for(&file, &projectors);
        found.push(Found {
            names: names_of(root, &file, registry),
            path: file,
            mmproj,
        });
    }
    if depth < MAX_DEPTH {
        folders.sort();
        for folder in folders {
            walk(root, &folder, depth + 1, registry, found);
        }
    }
}

/// The projector whose name carries the model's (`mmproj-NAME.gguf` beside
/// `NAME.gguf`), else the first by name: llama.cpp's converter and LM
/// Studio both put one projector beside the model.
fn projector_for(model: &Path, projectors: &[PathBuf]) -> Option<PathBuf> {
    let stem = model.file_stem()?.to_string_lossy().to_ascii_lowercase();
    projectors
        .iter()
        .find(|p| {
            p.file_stem()
                .is_some_and(|s| s.to_string_lossy().to_ascii_lowercase().contains(&stem))
        })
        .or_else(|| projectors.first())
        .cloned()
}

fn names_of(root: &Path, file: &Path, registry: &Registry) -> Vec<String> {
    let mut names = Vec::new();
    let file_name = file.file_name().map(|n| n.to_string_lossy().into_owned());
    if let Some(known) = registry
        .models()
        .iter()
        .find(|m| Some(&m.file_name) == file_name.as_ref() && file.parent() == Some(root))
    {
        names.push(known.alias.clone());
    }
    let relative = relative_name(root, file);
    names.push(hub_name(&relative).unwrap_or_else(|| relative.clone()));
    if let Some(stem) = file.file_stem() {
        names.push(stem.to_string_lossy().into_owned());
    }
    names.dedup();
    names
}

/// The path below `root`, with `/` between folders and no `.gguf`.
fn relative_name(root: &Path, path: &Path) -> String {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let joined = parts.join("/");
    match joined.len().checked_sub(5) {
        Some(cut) if joined.to_ascii_lowercase().ends_with(".gguf") => joined[..cut].to_string(),
        _ => joined,
    }
}

/// `hf:OWNER/REPO/FILE.gguf` for a file in the Hub cache
/// (`…/models--OWNER--REPO/snapshots/COMMIT/FILE`), the spec it was pulled by.
fn hub_name(relative: &str) -> Option<String> {
    let parts: Vec<&str> = relative.split('/').collect();
    let at = parts.iter().position(|p| p.starts_with("models--"))?;
    let repo = parts[at].strip_prefix("models--")?.replacen("--", "/", 1);
    let file = parts.get(at + 3..)?.join("/");
    (parts.get(at + 1) == Some(&"snapshots") && !file.is_empty())
        .then(|| format!("hf:{repo}/{file}.gguf"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"x").unwrap();
    }

    #[test]
    fn finds_files_projectors_checkpoints_and_hub_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(&root.join("gemma-3-270m-q4_k_m.gguf"));
        touch(&root.join("gemma-3-270m-q4_k_m.gguf.verified"));
        touch(&root.join("vision/model-f32.gguf"));
        touch(&root.join("vision/mmproj-f32.gguf"));
        touch(&root.join(".hidden/x.gguf"));
        touch(&root.join("ckpt/config.json"));
        touch(&root.join("ckpt/model.safetensors"));
        touch(&root.join("ckpt/sub/inner.gguf"));
        touch(&root.join(
            "hf/models--google--gemma-3-1b-it-qat-q4_0-gguf/snapshots/abc/gemma-3-1b-it-q4_0.gguf",
        ));
        let found = scan(root, &Registry::builtin()).unwrap();
        let ids: Vec<&str> = found.iter().map(|f| f.names[0].as_str()).collect();
        assert_eq!(
            ids,
            [
                "ckpt",
                "gemma3-270m",
                "hf:google/gemma-3-1b-it-qat-q4_0-gguf/gemma-3-1b-it-q4_0.gguf",
                "vision/model-f32"
            ]
        );
        assert_eq!(found[1].names, ["gemma3-270m", "gemma-3-270m-q4_k_m"]);
        assert_eq!(found[3].mmproj, Some(root.join("vision/mmproj-f32.gguf")));
        assert_eq!(found[1].mmproj, None);
    }

    #[test]
    fn a_projector_named_for_its_model_wins() {
        let projectors = vec![
            PathBuf::from("mmproj-a.gguf"),
            PathBuf::from("mmproj-b.gguf"),
        ];
        assert_eq!(
            projector_for(Path::new("b.gguf"), &projectors),
            Some(PathBuf::from("mmproj-b.gguf"))
        );
        assert_eq!(
            projector_for(Path::new("c.gguf"), &projectors),
            Some(PathBuf::from("mmproj-a.gguf"))
        );
    }

    #[test]
    fn a_missing_folder_is_an_error() {
        assert!(scan(Path::new("/no/such/folder"), &Registry::builtin()).is_err());
    }
}
