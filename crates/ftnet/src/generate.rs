//! `ftnet generate`: man pages and shell completions, made from the same
//! clap definitions that parse the command line (so they never drift from
//! `--help`). The Debian package (`scripts/package.sh`) ships their output.

use anyhow::Context;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write one man page (section 1) per command into `dir`: `ftnet.1`, then
/// `ftnet-router.1`, `ftnet-replica-join.1`, ... for every subcommand at
/// every depth. Returns the files written, the top page first.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    // Gives every subcommand its full name (`ftnet-replica-join`), which
    // names its page and its synopsis.
    cmd.build();
    let mut written = Vec::new();
    page(&cmd, dir, &mut written)?;
    Ok(written)
}

fn page(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone()).manual("ftnet manual");
    let path = dir.join(man.get_filename());
    let mut out = Vec::new();
    man.render(&mut out)
        .with_context(|| format!("rendering {}", path.display()))?;
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        page(sub, dir, written)?;
    }
    Ok(())
}

/// Write the completion script for `shell` to `out`.
pub fn completions(
    mut cmd: clap::Command,
    shell: clap_complete::Shell,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn top_level() -> Vec<String> {
        crate::Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect()
    }

    /// One page per command, each naming its command, and the top page
    /// lists every subcommand.
    #[test]
    fn a_man_page_per_command() {
        let dir = std::env::temp_dir().join(format!("ftnet-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let files = man_pages(crate::Cli::command(), &dir).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "ftnet.1");
        let top = std::fs::read_to_string(dir.join("ftnet.1"))
            .unwrap()
            .replace("\\-", "-");
        assert!(top.starts_with(".ie") || top.contains(".TH"), "{top}");
        for sub in top_level() {
            let file = format!("ftnet-{sub}.1");
            assert!(names.contains(&file), "no {file} in {names:?}");
            // roff escapes some hyphens as \-.
            let text = std::fs::read_to_string(dir.join(&file))
                .unwrap()
                .replace("\\-", "-");
            let title = format!(".TH ftnet-{sub} 1");
            assert!(text.contains(&title), "{file} has no {title}");
            assert!(
                text.contains(&format!("ftnet {sub}")),
                "{file}: no synopsis"
            );
            assert!(top.contains(&sub), "ftnet.1 does not list {sub}");
        }
        for nested in [
            "ftnet-replica-join.1",
            "ftnet-lab-up.1",
            "ftnet-generate-man.1",
        ] {
            assert!(names.iter().any(|n| n == nested), "no {nested}");
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        // The router's page carries its long help (the configuration format).
        let router = std::fs::read_to_string(dir.join("ftnet-router.1")).unwrap();
        assert!(router.contains("metrics_listen"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Each shell's script completes every subcommand.
    #[test]
    fn completions_name_every_subcommand() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            completions(crate::Cli::command(), shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            for sub in top_level() {
                assert!(text.contains(&sub), "{shell}: no {sub}");
            }
            assert!(text.contains("--config"), "{shell}: no --config");
        }
    }
}
