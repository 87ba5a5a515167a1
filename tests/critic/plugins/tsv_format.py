"""A user's input format, loaded as a plugin: ``ID<TAB>TEXT`` lines, ``\\n`` in TEXT a line break."""

from critic.document import DocumentError
from critic.inputs import InputFormat
from critic.registry import register_format


class TsvFormat(InputFormat):
    name = "tsv"
    help = "ID<TAB>TEXT lines"
    suffixes = (".tsv",)

    def documents(self, path, options, build):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            doc_id, sep, text = line.partition("\t")
            if not sep:
                raise DocumentError(f"{path}:{number}: expected ID<TAB>TEXT")
            doc = build.document(f"{path}:{number}", number, text.replace("\\n", "\n"), doc_id)
            if doc is not None:
                yield doc


register_format(TsvFormat())
