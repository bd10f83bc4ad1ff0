//! (c) The schemas themselves: every one published, compiling, with its own `$id` and
//! every property described; the specification links them and their README names them.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::registry::{
    DRAFT_2020_12, ID_PREFIX, SCHEMAS, compile, file_name, repo, schema_document, schema_path,
};

#[test]
fn every_schema_is_published_compiles_and_has_a_unique_id() {
    let dir = repo().join("spec/schemas");
    let on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("spec/schemas is missing ({}): {e}", dir.display()))
        .map(|entry| file_name(&entry.expect("a directory entry").path()))
        .filter(|name| name.ends_with(".schema.json"))
        .collect();
    for name in &on_disk {
        let stem = name.trim_end_matches(".schema.json");
        assert!(
            SCHEMAS.contains(&stem),
            "spec/schemas/{name} is not checked by this test: add it to SCHEMAS"
        );
    }
    let mut ids = BTreeMap::new();
    for stem in SCHEMAS {
        let doc = schema_document(stem);
        assert_eq!(
            doc["$schema"], DRAFT_2020_12,
            "{stem}.schema.json: $schema must be draft 2020-12"
        );
        let id = doc["$id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(id, format!("{ID_PREFIX}{stem}"), "{stem}.schema.json: $id");
        if let Some(other) = ids.insert(id.clone(), stem) {
            panic!("{stem}.schema.json and {other}.schema.json share the $id {id}");
        }
        for member in ["title", "description"] {
            assert!(
                doc[member].as_str().is_some_and(|s| !s.is_empty()),
                "{stem}.schema.json has no {member}"
            );
        }
        if let Err(e) = jsonschema::meta::validate(&doc) {
            panic!("{stem}.schema.json is not a valid draft 2020-12 schema: {e}");
        }
        if let Err(e) = compile(&doc) {
            panic!("{stem}.schema.json does not compile: {e}");
        }
        let mut undescribed = Vec::new();
        undescribed_properties(&doc, "#", &mut undescribed);
        assert!(
            undescribed.is_empty(),
            "{stem}.schema.json: properties without a description: {undescribed:?}"
        );
    }
}

/// Every property declared in `properties` has a `description`. Refinements in `if`,
/// `then`, `else` and `not` restate properties described where they are declared, and
/// `default`, `const` and `enum` hold data.
fn undescribed_properties(schema: &Value, at: &str, out: &mut Vec<String>) {
    match schema {
        Value::Object(members) => {
            for (key, value) in members {
                let here = format!("{at}/{key}");
                match key.as_str() {
                    "if" | "then" | "else" | "not" | "default" | "const" | "enum" => {}
                    "properties" => {
                        for (name, property) in value.as_object().into_iter().flatten() {
                            if property
                                .get("description")
                                .and_then(Value::as_str)
                                .is_none()
                            {
                                out.push(format!("{here}/{name}"));
                            }
                            undescribed_properties(property, &format!("{here}/{name}"), out);
                        }
                    }
                    _ => undescribed_properties(value, &here, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                undescribed_properties(item, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The specification links each schema, and the schemas' README names each one.
#[test]
fn the_spec_and_the_readme_name_every_schema() {
    let spec = std::fs::read_to_string(repo().join("spec/reversibility-v1.md"))
        .expect("spec/reversibility-v1.md");
    let readme = std::fs::read_to_string(repo().join("spec/schemas/README.md"))
        .expect("spec/schemas/README.md is missing");
    for linked in spec.split("schemas/").skip(1) {
        let Some(name) = linked.split([')', '`', ' ']).next() else {
            continue;
        };
        if name.ends_with(".schema.json") {
            assert!(
                schema_path(name.trim_end_matches(".schema.json")).is_file(),
                "the spec links schemas/{name}, which does not exist"
            );
        }
    }
    for stem in SCHEMAS {
        assert!(
            readme.contains(&format!("{stem}.schema.json")),
            "spec/schemas/README.md does not describe {stem}.schema.json"
        );
    }
}
