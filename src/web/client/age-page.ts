// Entry of /static/age.js: the upload page's encryption (window.SluiceAge, used by upload.js) and
// the share page of an encrypted bundle (age-share.ts).
import { encryptBytes, encryptFile, MANIFEST_NAME, newKey, tusFileReader } from './age-core.ts';
import { openSharePage } from './age-share.ts';

(window as unknown as { SluiceAge: unknown }).SluiceAge = { newKey, encryptFile, encryptBytes, tusFileReader, MANIFEST_NAME };

// Deferred like the other page scripts: the document is parsed when this runs.
openSharePage();
