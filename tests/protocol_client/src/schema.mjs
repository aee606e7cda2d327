// The wire schema, compiled by capnp-es from schema/dispatcher.capnp and
// schema/data_transfer.capnp at test time (generate.sh), so this client can
// never drift from the schema files. DISPATCH_SCHEMA_JS names the folder of
// the generated modules.

import * as fs from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";

const dir = process.env.DISPATCH_SCHEMA_JS;
if (!dir) throw new Error("DISPATCH_SCHEMA_JS is not set: the folder of the capnp-es output (see generate.sh)");
const load = (name) => import(pathToFileURL(path.join(dir, name)).href);

export const Wire = await load("dispatcher.js");
export const Transfer = await load("data_transfer.js");

// The enums the protocol uses (ProcessingMode, TargetWorkers, ClosureState):
// defined in dispatcher.capnp itself once it is self-contained; before that,
// in the journal schema it imported (see generate.sh).
const journal = fs.existsSync(path.join(dir, "journal.js")) ? await load("journal.js") : {};
export const Enums = {
  ProcessingMode: Wire.ProcessingMode ?? journal.ProcessingMode,
  TargetWorkers: Wire.TargetWorkers ?? journal.TargetWorkers,
  ClosureState: Wire.ClosureState ?? journal.ClosureState,
};
