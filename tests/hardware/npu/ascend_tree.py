#!/usr/bin/env python3
"""Write the Ascend version files a scenario describes under ROOT (default /usr/local/Ascend).

  ascend_tree.py ROOT --scenario scenarios/910b.json [--arch aarch64]

Creates driver/version.info, firmware/version.info and
ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info in the layout of the real
packages (captured/version_files.txt). A scenario without a "cann" version gets no toolkit.
"""

import argparse
import json
import os
import platform


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text)


def build(root, versions, arch):
    driver = versions.get('driver')
    if driver:
        write(os.path.join(root, 'driver', 'version.info'),
              'Version=%s\nascendhal_version=7.35.19\naicpu_version=1.0\ntdt_version=1.0\n'
              'log_version=1.0\nprof_version=2.0\ndvppkernels_version=1.1\ntsfw_version=1.0\n'
              'Innerversion=V100R001C15SPC006B220\n' % driver)
    firmware = versions.get('firmware')
    if firmware:
        write(os.path.join(root, 'firmware', 'version.info'),
              'Version=%s\nfirmware_version=1.0\npackage_version=%s\n' % (firmware, driver or ''))
    cann = versions.get('cann')
    if cann:
        write(os.path.join(root, 'ascend-toolkit', 'latest', '%s-linux' % arch, 'ascend_toolkit_install.info'),
              'package_name=Ascend-cann-toolkit\nversion=%s\ninnerversion=V100R001C15SPC001B100\n'
              'arch=%s\nos=linux\npath=%s/ascend-toolkit/%s/%s-linux\n' % (cann, arch, root, cann, arch))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root', nargs='?', default='/usr/local/Ascend')
    parser.add_argument('--scenario', required=True)
    parser.add_argument('--arch', default=platform.machine())
    args = parser.parse_args()
    with open(args.scenario) as handle:
        versions = json.load(handle).get('versions', {})
    build(args.root, versions, args.arch)


if __name__ == '__main__':
    main()
