"""The workflow's stages as functions of file paths.

Each Snakemake rule has a two-line script in ``workflow/scripts/`` that hands its
named ``input``, ``output`` and ``params`` to one function here through
:func:`ndir.stages.common.run_rule`. The functions read their inputs, call the
library and write their outputs atomically, so they can be run and tested
without Snakemake.

One module backs each rule file of ``workflow/rules/``: :mod:`.data`,
:mod:`.codebooks`, :mod:`.signatures`, :mod:`.baseline`, :mod:`.sparse`,
:mod:`.seeds`, :mod:`.jcf` and :mod:`.report`; :mod:`.common` holds what several of them
share.
"""
