//! `quantforge verify`: a recipe's exports made again and compared byte for
//! byte (from the cache, or recomputed), and files made by llama-quantize
//! recognised as the derivation they claim (`--as … --from BASE`); a flipped
//! byte fails, naming the tensor.

use crate::common;

fn verify(args: &[&std::ffi::OsStr]) -> std::process::Output {
    common::quantforge(&[&["verify".as_ref(), "-q".as_ref()], args].concat())
}

#[test]
fn every_export_of_a_recipe_verifies_and_a_flipped_byte_names_its_tensor() {
    let (dir, recipe) = common::built_quickstart();
    for preset in ["Q8_0", "Q6_K", "Q4_K_M"] {
        let file = dir.path().join(format!("recipes/out/tiny-llama-{preset}.gguf"));
        for extra in [None, Some("--recompute")] {
            let mut args = vec![file.as_os_str(), "--recipe".as_ref(), recipe.as_os_str()];
            args.extend(extra.map(std::ffi::OsStr::new));
            let out = verify(&args);
            assert!(out.status.success(), "{preset} {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
            assert!(String::from_utf8_lossy(&out.stdout).contains("every one equal to its derivation"));
        }
    }
    let file = dir.path().join("recipes/out/tiny-llama-Q6_K.gguf");
    let len = std::fs::metadata(&file).unwrap().len() as usize;
    common::flip_byte(&file, len - 1000);
    let out = verify(&[file.as_os_str(), "--recipe".as_ref(), recipe.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not its derivation: tensor `"), "{stderr}");
    assert!(stderr.contains("its bytes differ from byte"), "{stderr}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("recipes"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".quantforge-verify"))
        .collect();
    assert!(leftovers.is_empty(), "the scratch directory stays behind: {leftovers:?}");

    let other = dir.path().join("tests/data/tiny-llama.gguf");
    let out = verify(&[other.as_os_str(), "--recipe".as_ref(), recipe.as_os_str()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not an export of"), "{out:?}");
}

/// A metadata difference is said in words: a file type by its number and
/// name, never as `U32(15)`.
#[test]
fn a_metadata_difference_names_the_values() {
    let (dir, recipe) = common::built_quickstart();
    let file = dir.path().join("recipes/out/tiny-llama-Q4_K_M.gguf");
    let edited = dir.path().join("recipes/out/edited.gguf");
    let out = common::quantforge(&[
        "edit".as_ref(),
        file.as_os_str(),
        edited.as_os_str(),
        "--set".as_ref(),
        "general.file_type=u32:17".as_ref(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::rename(&edited, &file).unwrap();
    let out = verify(&[file.as_os_str(), "--recipe".as_ref(), recipe.as_os_str()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("metadata key `general.file_type` is 17 (Q5_K_M); the derivation has 15 (Q4_K_M)"),
        "{stderr}"
    );
}

/// Files llama-quantize made from the tiny model are recognised as what
/// they are, with and without flags and an imatrix, and not as another preset.
#[test]
fn files_made_by_llama_quantize_verify_as_their_derivation() {
    let Some(llama) = common::reference("build/bin/llama-quantize") else { return };
    let dir = tempfile::tempdir().unwrap();
    let base = common::tiny_model();
    let imatrix = common::repo().join("tests/data/imatrix/tiny-llama.imatrix.gguf");
    let imatrix = imatrix.to_str().unwrap();
    for (preset, flags) in [
        ("Q4_K_M", vec![]),
        ("Q5_K_S", vec!["--leave-output-tensor"]),
        ("IQ4_XS", vec!["--imatrix", imatrix]),
        ("Q3_K_M", vec!["--imatrix", imatrix, "--pure"]),
    ] {
        let theirs = dir.path().join(format!("{preset}.gguf"));
        let made =
            std::process::Command::new(&llama).args(&flags).arg(&base).arg(&theirs).arg(preset).output().unwrap();
        assert!(made.status.success(), "llama-quantize {preset}: {}", String::from_utf8_lossy(&made.stderr));
        let claim = format!("quantize {} {preset}", flags.join(" "));
        let out = verify(&[theirs.as_os_str(), "--as".as_ref(), claim.as_ref(), "--from".as_ref(), base.as_os_str()]);
        assert!(out.status.success(), "{claim}: {}", String::from_utf8_lossy(&out.stderr));

        let wrong = format!("quantize {} Q8_0", flags.join(" "));
        let out = verify(&[theirs.as_os_str(), "--as".as_ref(), wrong.as_ref(), "--from".as_ref(), base.as_os_str()]);
        assert_eq!(out.status.code(), Some(1), "{wrong}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("general.file_type"), "{out:?}");
    }
}
