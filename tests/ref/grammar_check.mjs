// grammar_check.mjs - validate constrained-decoding outputs with ajv, an
// independent JSON Schema validator.
//
//   node grammar_check.mjs NODE_MODULES SCHEMAS.json OUTPUTS.json LABEL
//
// SCHEMAS.json is tests/ref/grammar_schemas.json (an array of schemas);
// OUTPUTS.json is what test_grammar writes with TS_GRAMMAR_OUT: an array of
// {schema: index, output: text}. Every output must parse with JSON.parse
// and validate against its schema (draft 2020-12, ajv's defaults: string
// lengths in code points), and every schema must have outputs. Exit 1 on
// any failure, naming the schema, the output and ajv's errors.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nm, schemasPath, outputsPath, label = "outputs"] = process.argv.slice(2);
const require = createRequire(path.join(nm, "noop.js"));
const Ajv2020 = require("ajv/dist/2020").default;

const schemas = JSON.parse(fs.readFileSync(schemasPath, "utf8"));
const outputs = JSON.parse(fs.readFileSync(outputsPath, "utf8"));
const ajv = new Ajv2020({ strict: false, allErrors: true });
const validators = schemas.map((s) => ajv.compile(s));
const count = new Array(schemas.length).fill(0);
let bad = 0;
for (const { schema, output } of outputs) {
    count[schema]++;
    let value;
    try {
        value = JSON.parse(output);
    } catch (e) {
        bad++;
        console.error(`schema ${schema}: does not parse (${e.message}): ${JSON.stringify(output)}`);
        continue;
    }
    if (!validators[schema](value)) {
        bad++;
        console.error(`schema ${schema}: invalid: ${JSON.stringify(output)}\n  ${ajv.errorsText(validators[schema].errors)}`);
    }
}
count.forEach((n, i) => {
    if (n === 0) {
        bad++;
        console.error(`schema ${i}: no outputs`);
    }
});
console.log(`${label}: ${outputs.length} outputs over ${schemas.length} schemas, ${bad} failures`);
process.exit(bad ? 1 : 0);
